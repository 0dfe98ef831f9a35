//! Projections: the named field paths whose values a subscription's events carry, their
//! contract, and the parsing of the lists plugins send.

use kubeplug_json::path::{FieldPath, PathSet};
use kubeplug_policy::names::quoted;

use crate::bindings::wit;

/// A named field path whose values a subscription's events carry (`event.projected`).
///
/// Contract (checked by [`Description::check`](super::Description::check)): the name is 1
/// to [`MAX_PROJECTION_NAME`] bytes of ASCII letters, digits, `_`, `-` and `.`, unique within
/// its subscription; the path is at most [`MAX_PROJECTION_PATH`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    /// The name the plugin reads the values by.
    pub name: String,
    /// The path.
    pub path: FieldPath,
}

impl Projection {
    /// A projection as a plugin sent it, checked against the contract and parsed: the path's
    /// length is checked before it is parsed. The error names the field (`name` or `path`)
    /// and says why.
    pub fn parse(name: String, path: &str) -> Result<Self, (&'static str, String)> {
        if !is_projection_name(&name) {
            return Err(("name", invalid_projection_name(&name)));
        }
        if path.len() > MAX_PROJECTION_PATH {
            return Err((
                "path",
                format!("{} bytes; at most {MAX_PROJECTION_PATH}", path.len()),
            ));
        }
        let path = FieldPath::parse(path).map_err(|e| ("path", e.to_string()))?;
        Ok(Self { name, path })
    }
}

/// A list of [`Projection`]s with their paths as one [`PathSet`]: what an event or a cache
/// read evaluates, in one walk of the object for all of them.
#[derive(Debug, Clone, Default)]
pub struct Projections {
    list: Vec<Projection>,
    paths: PathSet,
}

/// Why a list of projections a plugin sent is refused; the caller says where the list was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProjectionListError {
    /// More entries than the bound (`max_projections`).
    TooMany {
        /// The entries sent.
        count: usize,
    },
    /// One entry breaks [`Projection`]'s contract.
    Invalid {
        /// The entry's position, from 0.
        projection: usize,
        /// `name` or `path`.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

impl Projections {
    /// A plugin's projections, checked against [`Projection`]'s contract: at most `bound`
    /// (counted before anything is parsed), each by [`Projection::parse`], names unique.
    pub(crate) fn parse_list(
        sent: Vec<wit::Projection>,
        bound: usize,
    ) -> Result<Self, ProjectionListError> {
        if sent.len() > bound {
            return Err(ProjectionListError::TooMany { count: sent.len() });
        }
        let mut list: Vec<Projection> = Vec::with_capacity(sent.len());
        for (projection, p) in sent.into_iter().enumerate() {
            let invalid = |field, reason| ProjectionListError::Invalid {
                projection,
                field,
                reason,
            };
            let parsed = Projection::parse(p.name, &p.path)
                .map_err(|(field, reason)| invalid(field, reason))?;
            if list.iter().any(|earlier| earlier.name == parsed.name) {
                return Err(invalid(
                    "name",
                    format!("{} is used twice", quoted(&parsed.name)),
                ));
            }
            list.push(parsed);
        }
        Ok(list.into())
    }

    /// The paths, numbered as the projections are.
    pub fn paths(&self) -> &PathSet {
        &self.paths
    }
}

impl From<Vec<Projection>> for Projections {
    fn from(list: Vec<Projection>) -> Self {
        let paths = PathSet::new(list.iter().map(|p| p.path.clone()));
        Self { list, paths }
    }
}

impl std::ops::Deref for Projections {
    type Target = [Projection];

    fn deref(&self) -> &[Projection] {
        &self.list
    }
}

impl<'p> IntoIterator for &'p Projections {
    type Item = &'p Projection;
    type IntoIter = std::slice::Iter<'p, Projection>;

    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

impl PartialEq for Projections {
    fn eq(&self, other: &Self) -> bool {
        self.list == other.list
    }
}

pub(super) fn invalid_projection_name(name: &str) -> String {
    format!(
        "{} is not 1 to {MAX_PROJECTION_NAME} bytes of letters, digits, '_', '-' and '.'",
        quoted(name)
    )
}

/// The most projections a subscription may declare by default (`max_projections`): 16.
/// Each is evaluated once for every object the subscription's informer stores, and its
/// values kept with the object.
pub const MAX_PROJECTIONS: usize = 16;

/// The longest projection name: 63 bytes.
pub const MAX_PROJECTION_NAME: usize = 63;

/// The longest projection path: 512 bytes, room for any path into a Kubernetes object.
pub const MAX_PROJECTION_PATH: usize = 512;

pub(super) fn is_projection_name(name: &str) -> bool {
    (1..=MAX_PROJECTION_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}
