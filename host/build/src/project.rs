//! A plugin project on disk: which language it is in and what it is called, from the
//! manifest of its language.

use std::path::{Path, PathBuf};

use kubeplug_policy::NameError;
use kubeplug_policy::names::check_plugin_name;

use crate::{Language, Project};

/// Each language's manifest, and the field naming the plugin.
const MANIFESTS: [(Language, &str, &str); 4] = [
    (Language::Rust, "Cargo.toml", "package.name"),
    (Language::C, "plugin.toml", "plugin.name"),
    (Language::JavaScript, "package.json", "name"),
    (Language::Python, "pyproject.toml", "project.name"),
];

/// Why a directory is not a plugin project.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// It holds no manifest of any language.
    #[error(
        "{dir}: not a plugin project: no Cargo.toml (Rust), plugin.toml (C), package.json \
         (JavaScript) or pyproject.toml (Python); `kubeplug new` makes one"
    )]
    NoManifest {
        /// The directory.
        dir: PathBuf,
    },
    /// It holds the manifests of more than one language.
    #[error("{dir}: holds {} at once; a plugin project is in one language", found.join(" and "))]
    Ambiguous {
        /// The directory.
        dir: PathBuf,
        /// The manifests found.
        found: Vec<&'static str>,
    },
    /// Its manifest cannot be read.
    #[error("{path}: cannot be read")]
    Unreadable {
        /// The manifest.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Its manifest is not valid JSON or TOML.
    #[error("{path}: not valid {format}")]
    Unparsable {
        /// The manifest.
        path: PathBuf,
        /// `JSON` or `TOML`.
        format: &'static str,
        /// The parser's error, with line and column.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Its manifest names no plugin, or one that breaks the naming rules.
    #[error("{path}: {field}: {cause}")]
    Name {
        /// The manifest.
        path: PathBuf,
        /// The field that holds the name.
        field: &'static str,
        /// What is wrong.
        cause: String,
    },
    /// The source file its language starts from is missing.
    #[error("{dir}: a {language} plugin needs {entry}, and there is none")]
    NoEntry {
        /// The directory.
        dir: PathBuf,
        /// The language.
        language: Language,
        /// The file.
        entry: &'static str,
    },
}

impl Project {
    /// The project in `dir`: its language from the one manifest it holds (see
    /// [`ProjectError::NoManifest`]), its name from that manifest, checked against the
    /// plugin naming rules.
    pub fn open(dir: &Path) -> Result<Project, ProjectError> {
        let found: Vec<(Language, &'static str, &'static str)> = MANIFESTS
            .into_iter()
            .filter(|(_, file, _)| dir.join(file).is_file())
            .collect();
        let (language, file, field) = match found.as_slice() {
            [] => {
                return Err(ProjectError::NoManifest {
                    dir: dir.to_owned(),
                });
            }
            [one] => *one,
            several => {
                return Err(ProjectError::Ambiguous {
                    dir: dir.to_owned(),
                    found: several.iter().map(|(_, file, _)| *file).collect(),
                });
            }
        };
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path).map_err(|source| ProjectError::Unreadable {
            path: path.clone(),
            source,
        })?;
        let name = manifest_name(&path, &text, language, field)?;
        let name = name.ok_or_else(|| ProjectError::Name {
            path: path.clone(),
            field,
            cause: "missing: it is the plugin's name".to_owned(),
        })?;
        check_plugin_name(&name).map_err(|NameError { value, rule, .. }| ProjectError::Name {
            path: path.clone(),
            field,
            cause: format!("{value} {rule}"),
        })?;
        if let Some(entry) = language.entry_file()
            && !dir.join(entry).is_file()
        {
            return Err(ProjectError::NoEntry {
                dir: dir.to_owned(),
                language,
                entry,
            });
        }
        Ok(Project {
            name,
            dir: dir.to_owned(),
            language,
        })
    }
}

/// The string at the dotted `field` of the manifest `path` holding `text`, `None` when
/// absent.
fn manifest_name(
    path: &Path,
    text: &str,
    language: Language,
    field: &'static str,
) -> Result<Option<String>, ProjectError> {
    let unparsable = |format| {
        move |e: Box<dyn std::error::Error + Send + Sync>| ProjectError::Unparsable {
            path: path.to_owned(),
            format,
            source: e,
        }
    };
    let document: serde_json::Value = if language == Language::JavaScript {
        serde_json::from_str(text).map_err(|e| unparsable("JSON")(Box::new(e)))?
    } else {
        let table: toml::Table =
            toml::from_str(text).map_err(|e| unparsable("TOML")(Box::new(e)))?;
        serde_json::to_value(table).map_err(|e| unparsable("TOML")(Box::new(e)))?
    };
    let value = field.split('.').try_fold(&document, |v, key| v.get(key));
    match value {
        None => Ok(None),
        Some(serde_json::Value::String(name)) => Ok(Some(name.clone())),
        Some(other) => Err(ProjectError::Name {
            path: path.to_owned(),
            field,
            cause: format!("{other}, not a string"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(files: &[(&str, &str)]) -> (tempfile::TempDir, Result<Project, ProjectError>) {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let opened = Project::open(dir.path());
        (dir, opened)
    }

    #[test]
    fn each_language_is_known_by_its_manifest() {
        for (files, language, name) in [
            (
                vec![("Cargo.toml", "[package]\nname = \"audit\"\n")],
                Language::Rust,
                "audit",
            ),
            (
                vec![
                    ("plugin.toml", "[plugin]\nname = \"audit-c\"\n"),
                    ("handler.c", ""),
                ],
                Language::C,
                "audit-c",
            ),
            (
                vec![
                    ("package.json", r#"{"name": "audit-js"}"#),
                    ("handler.js", ""),
                ],
                Language::JavaScript,
                "audit-js",
            ),
            (
                vec![
                    ("pyproject.toml", "[project]\nname = \"audit-py\"\n"),
                    ("handler.py", ""),
                ],
                Language::Python,
                "audit-py",
            ),
        ] {
            let (dir, opened) = project(&files);
            assert_eq!(
                opened.unwrap(),
                Project {
                    name: name.to_owned(),
                    dir: dir.path().to_owned(),
                    language,
                }
            );
        }
    }

    #[test]
    fn a_bad_project_is_refused_naming_the_file_and_the_cause() {
        for (files, expected) in [
            (vec![], "not a plugin project: no Cargo.toml"),
            (
                vec![("Cargo.toml", ""), ("package.json", "{}")],
                "holds Cargo.toml and package.json at once",
            ),
            (
                vec![("package.json", "{")],
                "package.json: not valid JSON: EOF while parsing",
            ),
            (
                vec![("package.json", "{}"), ("handler.js", "")],
                "package.json: name: missing",
            ),
            (
                vec![
                    ("package.json", r#"{"name": "@team/audit"}"#),
                    ("handler.js", ""),
                ],
                "package.json: name: \"@team/audit\" is not a DNS label",
            ),
            (
                vec![("pyproject.toml", "[project]\nname = 7\n")],
                "project.name: 7, not a string",
            ),
            (
                vec![("plugin.toml", "[plugin]\nname = \"audit\"\n")],
                "a C plugin needs handler.c, and there is none",
            ),
        ] {
            let (_dir, opened) = project(&files);
            let error = opened.unwrap_err();
            // The whole chain, as `kubeplug build` prints it.
            let mut message = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                message = format!("{message}: {cause}");
                source = cause.source();
            }
            assert!(
                message.contains(expected),
                "{message} should say {expected:?}"
            );
        }
    }
}
