//! What a plugin may name, checked before a name reaches a request path, a discovery URL or
//! a log line: namespaces, object names and the parts of a resource type. Plugins are not
//! trusted: `web/status` as a name would turn a patch into a status write, and
//! `v1/namespaces/kube-system/secrets` as a version would make the host read Secrets.
//!
//! Type-specific name rules (a Pod's name is a DNS subdomain, a Role's may hold `:`) stay
//! with the API server, or the local cluster that plays it; here a name only has to be a
//! safe path segment.
//!
//! The one DNS-1123 check of the workspace is here too ([`is_dns_label`],
//! [`is_dns_subdomain`]): this crate is the lowest that every user may depend on, so the
//! informer's label selectors and the local HTTP API's object names use these.

use std::fmt::Write as _;

/// The most bytes of a plugin's text quoted in an error, a log line or a report.
pub const MAX_QUOTED: usize = 256;

/// Why a name given by a plugin cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {value} {rule}")]
pub struct NameError {
    /// What the name was for: `namespace`, `name`, `group`, `version`, `kind` or `plugin name`.
    pub what: &'static str,
    /// The name, quoted and cut ([`quoted`]).
    pub value: String,
    /// The rule it breaks.
    pub rule: &'static str,
}

fn refuse(what: &'static str, value: &str, rule: &'static str) -> Result<(), NameError> {
    Err(NameError {
        what,
        value: quoted(value),
        rule,
    })
}

/// `text` as a Rust string literal (control characters and quotes escaped), cut to
/// [`MAX_QUOTED`] bytes of the original with its whole length noted: what a host message may
/// show of text a plugin chose, so that no newline forges a log line and no 48 MiB name is
/// printed whole.
pub fn quoted(text: &str) -> String {
    if text.len() <= MAX_QUOTED {
        return format!("{text:?}");
    }
    let mut end = MAX_QUOTED;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = format!("{:?}", &text[..end]);
    let _ = write!(out, "… ({} bytes in all)", text.len());
    out
}

/// `text` with its control characters escaped (`\n`, `\u{1b}`), quotes and the rest as
/// they are: plugin text inside the host's own log lines, where a newline would forge a line.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// An Event's reason, as the API server wants it and a log line can show it: 1 to 128
/// bytes of ASCII letters, digits and `_.:-` (`MissingLabels`, `Backoff`).
pub fn check_event_reason(reason: &str) -> Result<(), NameError> {
    let valid = (1..=128).contains(&reason.len())
        && reason
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
    if valid {
        return Ok(());
    }
    refuse(
        "reason",
        reason,
        "is not 1-128 bytes of ASCII letters, digits and '_.:-'",
    )
}

/// `text` [`printable`] and cut to [`MAX_QUOTED`] bytes with its whole length noted, not
/// quoted: a message of a plugin's own (an error it returned, a refusal of its settings)
/// inside a host message.
pub fn excerpt(text: &str) -> String {
    let mut end = text.len().min(MAX_QUOTED);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = printable(&text[..end]).into_owned();
    if end < text.len() {
        let _ = write!(out, "… ({} bytes in all)", text.len());
    }
    out
}

/// A DNS-1123 label, as Kubernetes' `IsDNS1123Label`: 1 to 63 lowercase letters, digits and
/// `-`, starting and ending with a letter or digit (namespaces, plugin names, API versions).
pub fn is_dns_label(text: &str) -> bool {
    text.len() <= 63 && is_label_part(text)
}

/// A DNS-1123 subdomain, as Kubernetes' `IsDNS1123Subdomain`: 1 to 253 bytes of
/// dot-separated parts, each of lowercase letters, digits and `-`, starting and ending with
/// a letter or digit (most objects' names, API groups, a label key's prefix). As
/// kube-apiserver's, the parts are not held to a label's 63 bytes.
pub fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(is_label_part)
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, of any length.
fn is_label_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alphanumeric = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    bytes.first().is_some_and(alphanumeric)
        && bytes.last().is_some_and(alphanumeric)
        && bytes.iter().all(|b| alphanumeric(b) || *b == b'-')
}

/// A plugin's name (what its `describe()` returns, its file's stem, its configuration
/// section): a DNS-1123 label.
pub fn check_plugin_name(name: &str) -> Result<(), NameError> {
    check_dns_label("plugin name", name)
}

/// A namespace: a DNS-1123 label.
pub fn check_namespace(namespace: &str) -> Result<(), NameError> {
    check_dns_label("namespace", namespace)
}

fn check_dns_label(what: &'static str, value: &str) -> Result<(), NameError> {
    if is_dns_label(value) {
        return Ok(());
    }
    refuse(
        what,
        value,
        "is not a DNS label (1-63 lowercase letters, digits and '-', not at either end)",
    )
}

/// An object's name: one safe path segment. Not empty, not `.` or `..`, and without `/`,
/// `%`, `?`, `#` or control characters; anything else (`system:aggregate-to-view`) is the
/// API server's to judge.
pub fn check_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return refuse("name", name, "is empty");
    }
    if name == "." || name == ".." {
        return refuse("name", name, "is a relative path segment");
    }
    if name
        .chars()
        .any(|c| matches!(c, '/' | '%' | '?' | '#') || c.is_control())
    {
        return refuse(
            "name",
            name,
            "holds '/', '%', '?', '#' or a control character",
        );
    }
    Ok(())
}

/// An API group: empty (the core group) or a DNS-1123 subdomain ([`is_dns_subdomain`]).
pub fn check_group(group: &str) -> Result<(), NameError> {
    if group.is_empty() || is_dns_subdomain(group) {
        return Ok(());
    }
    refuse(
        "group",
        group,
        "is not empty or a DNS subdomain (dot-separated lowercase letters, digits and '-', \
         each part starting and ending with a letter or digit, at most 253 bytes)",
    )
}

/// An API version: a DNS-1123 label (`v1`, `v1beta2`).
pub fn check_version(version: &str) -> Result<(), NameError> {
    if is_dns_label(version) {
        return Ok(());
    }
    refuse(
        "version",
        version,
        "is not a DNS label (1-63 lowercase letters, digits and '-')",
    )
}

/// A kind: an identifier of 1 to 63 ASCII letters and digits, starting with a letter.
pub fn check_kind(kind: &str) -> Result<(), NameError> {
    let identifier = (1..=63).contains(&kind.len())
        && kind.starts_with(|c: char| c.is_ascii_alphabetic())
        && kind.bytes().all(|b| b.is_ascii_alphanumeric());
    if identifier {
        return Ok(());
    }
    refuse(
        "kind",
        kind,
        "is not an identifier (1-63 ASCII letters and digits, a letter first)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_safe_path_segments() {
        for good in ["web", "system:aggregate-to-view", "a b", "x.y", "ümlaut"] {
            assert_eq!(check_name(good), Ok(()), "{good:?}");
        }
        for bad in [
            "",
            ".",
            "..",
            "web/status",
            "web?force=true",
            "a%2Fb",
            "a#b",
            "a\nb",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn namespaces_are_dns_labels() {
        assert_eq!(check_namespace("team-a"), Ok(()));
        for bad in [
            "",
            "kube system",
            "../x",
            "a/b",
            "Upper",
            "-a",
            &"a".repeat(64),
        ] {
            let error = check_namespace(bad).unwrap_err();
            assert_eq!(error.what, "namespace");
        }
    }

    #[test]
    fn dns_labels_and_subdomains_are_kubernetes_own() {
        for good in ["a", "a1", "label-audit", &"a".repeat(63)] {
            assert!(is_dns_label(good), "{good:?}");
            assert!(is_dns_subdomain(good), "{good:?}");
        }
        for bad in ["", "Label", "-a", "a-", "a_b", "a.b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad:?}");
        }
        for good in ["cm-1.example", "coordination.k8s.io", &"a".repeat(64)] {
            assert!(is_dns_subdomain(good), "{good:?}");
        }
        let longest = ["a"; 127].join(".");
        assert!(is_dns_subdomain(&longest), "253 bytes");
        let too_long = format!("{longest}a");
        for bad in ["", "Bad_Name", "-a", "a.-b", "a..b", ".a", "a.", &too_long] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
    }

    #[test]
    fn type_parts_are_checked_each_by_its_rule() {
        assert_eq!(check_group(""), Ok(()));
        assert_eq!(check_group("apps"), Ok(()));
        assert_eq!(check_group("coordination.k8s.io"), Ok(()));
        assert!(check_group("evil.com/../..").is_err());
        assert!(check_group("a..b").is_err());
        assert_eq!(check_version("v1beta2"), Ok(()));
        assert!(check_version("v1/namespaces/kube-system/secrets").is_err());
        assert_eq!(check_kind("CustomResourceDefinition"), Ok(()));
        for bad in ["", "Pod/x", "1Pod", "Pod s"] {
            assert!(check_kind(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn printable_text_escapes_control_characters_only() {
        assert_eq!(printable("plain \"text\" é"), "plain \"text\" é");
        assert_eq!(
            printable("ok\n2026-12-02T00:00:00Z INFO forged\u{1b}[31m"),
            "ok\\n2026-12-02T00:00:00Z INFO forged\\u{1b}[31m"
        );
    }

    #[test]
    fn an_excerpt_is_printable_and_cut() {
        assert_eq!(excerpt("settings: bad\nvalue"), "settings: bad\\nvalue");
        let long = excerpt(&"x".repeat(1000));
        assert_eq!(
            long,
            format!("{}… (1000 bytes in all)", "x".repeat(MAX_QUOTED))
        );
    }

    #[test]
    fn event_reasons_are_short_identifiers() {
        for good in ["MissingLabels", "Back-off", "a.b:c_d"] {
            assert_eq!(check_event_reason(good), Ok(()), "{good:?}");
        }
        for bad in ["", "two words", "Fake\nline", &"R".repeat(129)] {
            assert!(check_event_reason(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_quoted_value_escapes_control_characters_and_is_cut() {
        assert_eq!(quoted("a\nb"), r#""a\nb""#);
        let huge = "é".repeat(1000);
        let shown = quoted(&huge);
        assert!(shown.len() < MAX_QUOTED + 40, "{}", shown.len());
        assert!(shown.ends_with("… (2000 bytes in all)"), "{shown}");
        let error = check_name(&format!("a/{}", "x".repeat(50 << 20))).unwrap_err();
        assert!(error.to_string().len() < 512);
    }
}
