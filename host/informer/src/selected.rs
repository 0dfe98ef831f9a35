//! Field-path values selected once, when an object is stored, and kept with it.
//!
//! An Indexer walks each object it stores once for all its `path` indexes and for the
//! projection paths its readers registered ([`Indexer::add_projection`]). The values of the
//! projection paths stay with the object as byte ranges into its JSON, so that every
//! handler that projects the same path reads them without walking the object again, and
//! an update's old values come from the stored old object for free.
//!
//! [`Indexer::add_projection`]: crate::indexer::Indexer::add_projection

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use kubeplug_json::ScanError;
use kubeplug_json::path::{FieldPath, PathSet, Roots, Values};

use crate::object::Object;

/// The paths an Indexer selects in each object it stores: its `path` indexes' paths first,
/// then the projection paths. One walk of the object evaluates them all.
#[derive(Debug, Default)]
pub(crate) struct SelectedPaths {
    set: PathSet,
    /// The names of the `path` indexes, paths `0..index_names.len()` of `set`.
    index_names: Box<[String]>,
    /// Projection path text → its number in `set`.
    projections: HashMap<Box<str>, usize>,
}

impl SelectedPaths {
    pub(crate) fn new<'p>(
        indexes: impl IntoIterator<Item = (&'p str, &'p FieldPath)>,
        projections: impl IntoIterator<Item = &'p FieldPath>,
    ) -> Self {
        let (index_names, mut paths): (Vec<String>, Vec<FieldPath>) = indexes
            .into_iter()
            .map(|(name, path)| (name.to_owned(), path.clone()))
            .unzip();
        let mut numbers = HashMap::new();
        for path in projections {
            numbers.insert(path.as_str().into(), paths.len());
            paths.push(path.clone());
        }
        Self {
            set: PathSet::new(paths),
            index_names: index_names.into(),
            projections: numbers,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.set.paths().is_empty()
    }

    /// The names of the `path` indexes, in path order.
    pub(crate) fn index_names(&self) -> &[String] {
        &self.index_names
    }

    /// Each path's raw values in `json`, or the error that stopped its walk, and where the
    /// root members lie. With `old`, the object's previous version stored with these very
    /// paths: a root member that is the same text in both (`spec` when only the status
    /// changed) is not walked, its paths' values are the old ones moved to the new text.
    pub(crate) fn select<'a>(
        self: &Arc<Self>,
        json: &'a str,
        old: Option<&Object>,
    ) -> (Values<'a>, Option<Roots>) {
        let previous = old.and_then(|old| Some((old.json(), old.selected_cell().previous(self)?)));
        let Some((old_json, previous)) = previous else {
            return self.set.select_roots(json);
        };
        let Ok(roots) = self.set.roots(json) else {
            return self.set.select_roots(json);
        };
        // A root member is walked unless it is the same text as in the old version.
        let walk: Vec<bool> = roots
            .iter()
            .zip(&*previous.roots)
            .map(|(new, old)| match (new, old) {
                (Some(new), Some((start, end))) => {
                    json[new.clone()] != old_json[*start as usize..*end as usize]
                }
                (None, None) => false,
                _ => true,
            })
            .collect();
        let mut values = self.set.select_under(json, &roots, &walk);
        for (path, values) in values.iter_mut().enumerate() {
            let root = self.set.root_of(path);
            if walk[root] {
                continue;
            }
            let (Some(new_root), Some((old_root, _))) = (&roots[root], previous.roots[root]) else {
                continue;
            };
            *values = match previous.selection(old_json, path) {
                Some(Selection::Values(old_values)) => Ok(old_values
                    .map(|raw| {
                        let at = offset(old_json, raw) - old_root as usize + new_root.start;
                        &json[at..at + raw.len()]
                    })
                    .collect()),
                Some(Selection::Malformed) => Err(ScanError {
                    at: new_root.start,
                    what: "malformed along the path, as before",
                }),
                None => {
                    let mut raw_values = Vec::new();
                    self.set.paths()[path]
                        .for_each_raw(json, |raw| raw_values.push(raw))
                        .map(|()| raw_values)
                }
            };
        }
        (values, Some(roots))
    }
}

/// Where `part`, a slice of `whole`, starts in it.
fn offset(whole: &str, part: &str) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}

/// The values selected in one object, as ranges into its JSON.
struct Selected {
    paths: Arc<SelectedPaths>,
    /// Per first field of the paths: the range of the object's member of that name.
    /// Empty when the walk that selected the values failed somewhere.
    roots: Box<[Option<(u32, u32)>]>,
    /// Per path of `paths.set`.
    slots: Box<[Slot]>,
    /// Byte ranges into the object's JSON, `start..end`.
    ranges: Box<[(u32, u32)]>,
}

/// What an object keeps for one path.
#[derive(Clone, Copy)]
enum Slot {
    /// Its values are `ranges[from..to]`.
    Kept { from: u32, to: u32 },
    /// The object's JSON is malformed along the path.
    Malformed,
    /// Over the object's budget of kept values ([`kept_values_budget`]): readers evaluate it.
    NotKept,
}

/// How many values one object may keep, over all paths: a range costs 8 bytes,
/// and a path may select every element of a long array of small numbers (a value per two
/// bytes of JSON), so the budget keeps what the ranges cost to a quarter of the JSON.
fn kept_values_budget(json_len: usize) -> usize {
    json_len / 32 + 8
}

/// The values a stored object keeps, set once by the Indexer that stores it.
///
/// Contract: derived from the object's JSON alone, so it takes no part in comparing
/// objects; an object stored again (by a replace) keeps what it was first given.
#[derive(Clone, Default)]
pub(crate) struct SelectedCell(OnceLock<Arc<Selected>>);

impl PartialEq for SelectedCell {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for SelectedCell {}

impl fmt::Debug for SelectedCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SelectedCell")
    }
}

/// What a stored object holds for one projection path.
#[derive(Debug)]
pub enum Selection<'o> {
    /// The raw JSON text of each value the path selects, in document order.
    Values(SelectedValues<'o>),
    /// The object's JSON is malformed along the path: it selects nothing.
    Malformed,
}

/// The raw values of one path in a stored object.
#[derive(Debug, Clone)]
pub struct SelectedValues<'o> {
    json: &'o str,
    ranges: std::slice::Iter<'o, (u32, u32)>,
}

impl<'o> Iterator for SelectedValues<'o> {
    type Item = &'o str;

    fn next(&mut self) -> Option<&'o str> {
        let &(start, end) = self.ranges.next()?;
        Some(&self.json[start as usize..end as usize])
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.ranges.size_hint()
    }
}

impl SelectedCell {
    /// Keeps the values of every path among `selected` (as [`SelectedPaths::select`]
    /// returned them for `json`) within the budget, unless the cell was set before or `json`
    /// is too long for 32-bit ranges (then readers evaluate the paths themselves).
    pub(crate) fn keep(
        &self,
        paths: &Arc<SelectedPaths>,
        json: &str,
        selected: &[Result<Vec<&str>, ScanError>],
        roots: Option<Roots>,
    ) {
        if self.0.get().is_some() || u32::try_from(json.len()).is_err() {
            return;
        }
        let budget = kept_values_budget(json.len());
        let mut ranges = Vec::new();
        let slots = selected
            .iter()
            .map(|values| {
                let Ok(values) = values else {
                    return Slot::Malformed;
                };
                if ranges.len() + values.len() > budget {
                    return Slot::NotKept;
                }
                let from = ranges.len() as u32;
                ranges.extend(values.iter().map(|raw| {
                    let start = offset(json, raw) as u32;
                    (start, start + raw.len() as u32)
                }));
                Slot::Kept {
                    from,
                    to: ranges.len() as u32,
                }
            })
            .collect();
        // Set at most once: a concurrent `keep` of the same values loses harmlessly.
        let roots = roots
            .unwrap_or_default()
            .into_iter()
            .map(|root| root.map(|range| (range.start as u32, range.end as u32)))
            .collect();
        let _ = self.0.set(Arc::new(Selected {
            paths: paths.clone(),
            roots,
            slots,
            ranges: ranges.into(),
        }));
    }

    /// The values of projection `path` in `json` (the object's own), if they were kept.
    pub(crate) fn get<'o>(&'o self, json: &'o str, path: &FieldPath) -> Option<Selection<'o>> {
        let selected = self.0.get()?;
        let number = *selected.paths.projections.get(path.as_str())?;
        selected.selection(json, number)
    }

    /// What the object kept when it was stored with these very `paths`, with where its root
    /// members lie.
    fn previous(&self, paths: &Arc<SelectedPaths>) -> Option<&Selected> {
        let selected = self.0.get()?;
        (Arc::ptr_eq(&selected.paths, paths) && !selected.roots.is_empty()).then_some(&**selected)
    }

    /// The values of path `number` of `paths` in `json` (the object's own), if they were
    /// kept when the object was stored with these very paths.
    pub(crate) fn kept<'o>(
        &'o self,
        json: &'o str,
        paths: &Arc<SelectedPaths>,
        number: usize,
    ) -> Option<Selection<'o>> {
        let selected = self.0.get()?;
        if !Arc::ptr_eq(&selected.paths, paths) {
            return None;
        }
        selected.selection(json, number)
    }
}

impl Selected {
    fn selection<'o>(&'o self, json: &'o str, number: usize) -> Option<Selection<'o>> {
        match self.slots[number] {
            Slot::Kept { from, to } => Some(Selection::Values(SelectedValues {
                json,
                ranges: self.ranges[from as usize..to as usize].iter(),
            })),
            Slot::Malformed => Some(Selection::Malformed),
            Slot::NotKept => None,
        }
    }
}

impl<'o> Selection<'o> {
    /// Whether this is what a walk selected: the same values, text for text, or both
    /// malformed.
    pub(crate) fn is(&self, walked: &Result<Vec<&str>, ScanError>) -> bool {
        match (self, walked) {
            (Self::Values(values), Ok(walked)) => values.clone().eq(walked.iter().copied()),
            (Self::Malformed, Err(_)) => true,
            _ => false,
        }
    }

    /// The values, or `None` when malformed.
    pub fn into_values(self) -> Option<Vec<&'o str>> {
        match self {
            Self::Values(values) => Some(values.collect()),
            Self::Malformed => None,
        }
    }
}
