//! Now as the API server writes a `metadata.creationTimestamp`: the one place the host
//! stamps objects it creates as a server would (the local cluster's files, its writer, the
//! local HTTP API).

/// Now in RFC 3339, UTC, truncated to whole seconds as kube-apiserver writes
/// `metadata.creationTimestamp` (`2026-12-04T22:07:21Z`: a whole second prints without a
/// fraction).
///
/// ```
/// let now = kubeplug_memory::creation_timestamp();
/// assert_eq!(now.len(), "2026-12-04T22:07:21Z".len());
/// ```
pub fn creation_timestamp() -> String {
    let now = jiff::Timestamp::now().as_second();
    jiff::Timestamp::from_second(now)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_seconds_in_utc() {
        let now = creation_timestamp();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.starts_with("20") && now.ends_with('Z'), "{now}");
        assert!(now.parse::<jiff::Timestamp>().is_ok(), "{now}");
    }
}
