//! The bearer token: the one credential the server takes ([`ApiOptions::bearer_token`]).
//!
//! [`ApiOptions::bearer_token`]: crate::ApiOptions::bearer_token

use http::{HeaderMap, header};
use subtle::ConstantTimeEq;

/// Whether `headers` carry `Authorization: Bearer <expected>` (the scheme spelt so, one
/// space, the token exactly), or no token is `expected`.
///
/// The tokens are compared in constant time, so that how long a refusal takes does not tell
/// a guesser how much of the token it got right; only the length can show. `subtle` does
/// the comparing: it is in the build already (rustls depends on it), and its comparison is
/// written so that the optimizer cannot turn it back into one that stops at the first
/// difference, which a loop written here could not promise.
pub(crate) fn authorized(expected: Option<&str>, headers: &HeaderMap) -> bool {
    let Some(expected) = expected else {
        return true;
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    given.is_some_and(|given| bool::from(given.as_bytes().ct_eq(expected.as_bytes())))
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn with_authorization(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(value).expect("a header value"),
        );
        headers
    }

    #[test]
    fn only_the_exact_token_is_let_in() {
        let token = Some("s3cret-token");
        assert!(authorized(
            token,
            &with_authorization("Bearer s3cret-token")
        ));
        for refused in [
            "Bearer s3cret-tokeN",
            "Bearer s3cret-toke",
            "Bearer s3cret-token2",
            "Bearer s3cret-token ",
            "Bearer  s3cret-token",
            "bearer s3cret-token",
            "Basic s3cret-token",
            "s3cret-token",
            "Bearer ",
        ] {
            assert!(
                !authorized(token, &with_authorization(refused)),
                "{refused:?}"
            );
        }
        assert!(!authorized(token, &HeaderMap::new()));
    }

    #[test]
    fn without_a_token_every_request_is_let_in() {
        assert!(authorized(None, &HeaderMap::new()));
        assert!(authorized(None, &with_authorization("Bearer anything")));
    }
}
