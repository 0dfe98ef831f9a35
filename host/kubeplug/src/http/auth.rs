//! Who may read `/metrics` and `/plugins` when they are served securely: as
//! controller-runtime's `WithAuthenticationAndAuthorization`, a caller's bearer token is
//! authenticated with a TokenReview and the caller authorised with a SubjectAccessReview of
//! the non-resource verb `get` on the path, each answer cached for a while.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kubeplug_policy::names::excerpt;
use sha2::{Digest as _, Sha256};
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// How long a token's review is trusted, whether it authenticated or not
/// (controller-runtime's value).
const TOKEN_TTL: Duration = Duration::from_secs(60);

/// How long an allowed, and a denied, access is trusted (controller-runtime's values: a new
/// binding takes effect within half a minute, a removed one within five).
const ALLOW_TTL: Duration = Duration::from_secs(5 * 60);
const DENY_TTL: Duration = Duration::from_secs(30);

/// How long one review may take before the request fails with `500`.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Reviews in flight at once: callers with uncached tokens queue here, so that a flood of
/// made-up tokens costs the API server at most this many requests at a time.
const MAX_REVIEWS: usize = 8;

/// A longer `Authorization` token is not reviewed: `401`. Service-account tokens are about
/// 1 KiB, OIDC tokens a few.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Entries of each cache. When full, expired entries go; if none has, the whole cache does
/// (it only saves reviews).
const CACHE_ENTRIES: usize = 4096;

/// A caller, as a TokenReview names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Caller {
    pub(crate) username: String,
    pub(crate) uid: Option<String>,
    pub(crate) groups: Vec<String>,
    pub(crate) extra: BTreeMap<String, Vec<String>>,
}

/// The API server's verdicts; behind a trait so that the caching and the answers are tested
/// without one.
pub(crate) trait Reviews: Send + Sync + 'static {
    /// Who `token` belongs to; `None` when it does not authenticate.
    fn authenticate<'a>(&'a self, token: &'a str) -> BoxFuture<'a, anyhow::Result<Option<Caller>>>;

    /// Whether `caller` may `get` the non-resource path `path`.
    fn authorize<'a>(
        &'a self,
        caller: &'a Caller,
        path: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<bool>>;
}

/// [`Reviews`] by the API server the host's client talks to.
pub(crate) struct KubeReviews(pub(crate) kube::Client);

impl Reviews for KubeReviews {
    fn authenticate<'a>(&'a self, token: &'a str) -> BoxFuture<'a, anyhow::Result<Option<Caller>>> {
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: token.to_owned(),
                    audiences: None,
                },
                ..TokenReview::default()
            };
            let answer = Api::<TokenReview>::all(self.0.clone())
                .create(&PostParams::default(), &review)
                .await?;
            let status = answer.status.unwrap_or_default();
            if status.authenticated != Some(true) {
                return Ok(None);
            }
            let user = status.user.unwrap_or_default();
            Ok(user.username.map(|username| Caller {
                username,
                uid: user.uid,
                groups: user.groups.unwrap_or_default(),
                extra: user.extra.unwrap_or_default(),
            }))
        })
    }

    fn authorize<'a>(
        &'a self,
        caller: &'a Caller,
        path: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<bool>> {
        Box::pin(async move {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(caller.username.clone()),
                    uid: caller.uid.clone(),
                    groups: Some(caller.groups.clone()),
                    extra: Some(caller.extra.clone()),
                    non_resource_attributes: Some(NonResourceAttributes {
                        path: Some(path.to_owned()),
                        verb: Some("get".to_owned()),
                    }),
                    resource_attributes: None,
                },
                ..SubjectAccessReview::default()
            };
            let answer = Api::<SubjectAccessReview>::all(self.0.clone())
                .create(&PostParams::default(), &review)
                .await?;
            Ok(answer
                .status
                .is_some_and(|s| s.allowed && s.denied != Some(true)))
        })
    }
}

/// Answers with an expiry; bounded by [`CACHE_ENTRIES`].
struct Expiring<K, V>(HashMap<K, (V, Instant)>);

impl<K: Hash + Eq, V: Clone> Expiring<K, V> {
    fn get(&self, key: &K, now: Instant) -> Option<V> {
        self.0
            .get(key)
            .filter(|(_, expiry)| *expiry > now)
            .map(|(value, _)| value.clone())
    }

    fn insert(&mut self, key: K, value: V, now: Instant, ttl: Duration) {
        if self.0.len() >= CACHE_ENTRIES {
            self.0.retain(|_, (_, expiry)| *expiry > now);
            if self.0.len() >= CACHE_ENTRIES {
                self.0.clear();
            }
        }
        self.0.insert(key, (value, now + ttl));
    }
}

/// Authenticates and authorises requests. Each cache has one writer at a time, under its
/// lock; a review runs outside the lock.
pub(crate) struct Gate {
    reviews: Arc<dyn Reviews>,
    /// By the token's SHA-256: the tokens themselves are not kept.
    tokens: Mutex<Expiring<[u8; 32], Option<Caller>>>,
    decisions: Mutex<Expiring<(Caller, String), bool>>,
    in_flight: Semaphore,
}

/// Why a request is turned away.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No bearer token, or one that does not authenticate: `401`.
    Unauthenticated,
    /// The caller may not `get` the path: `403`.
    Forbidden { username: String },
    /// A review failed (the API server unreachable, the host not allowed to review): `500`.
    ReviewFailed(String),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Unauthenticated => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"kubeplug\"")],
                "Unauthorized\n",
            )
                .into_response(),
            Refusal::Forbidden { username } => (
                StatusCode::FORBIDDEN,
                format!(
                    "Forbidden: user {} may not get this path\n",
                    excerpt(&username)
                ),
            )
                .into_response(),
            Refusal::ReviewFailed(what) => {
                (StatusCode::INTERNAL_SERVER_ERROR, format!("{what}\n")).into_response()
            }
        }
    }
}

impl Gate {
    pub(crate) fn new(reviews: Arc<dyn Reviews>) -> Self {
        Self {
            reviews,
            tokens: Mutex::new(Expiring(HashMap::new())),
            decisions: Mutex::new(Expiring(HashMap::new())),
            in_flight: Semaphore::new(MAX_REVIEWS),
        }
    }

    /// Whether the bearer of `headers` may `get` `path`.
    pub(crate) async fn check(&self, headers: &HeaderMap, path: &str) -> Result<(), Refusal> {
        let token = bearer_token(headers).ok_or(Refusal::Unauthenticated)?;
        let caller = self.caller(token).await?.ok_or(Refusal::Unauthenticated)?;
        if self.allowed(&caller, path).await? {
            Ok(())
        } else {
            tracing::debug!(user = %excerpt(&caller.username), path, "access to the endpoint denied");
            Err(Refusal::Forbidden {
                username: caller.username,
            })
        }
    }

    async fn caller(&self, token: &str) -> Result<Option<Caller>, Refusal> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(known) = self.lock_tokens().get(&key, Instant::now()) {
            return Ok(known);
        }
        let caller = self
            .review(self.reviews.authenticate(token))
            .await
            .map_err(|error| {
                tracing::warn!(
                    "a TokenReview for a caller of the HTTP endpoints failed: {error:#}"
                );
                Refusal::ReviewFailed("Authentication failed".to_owned())
            })?;
        self.lock_tokens()
            .insert(key, caller.clone(), Instant::now(), TOKEN_TTL);
        Ok(caller)
    }

    async fn allowed(&self, caller: &Caller, path: &str) -> Result<bool, Refusal> {
        let key = (caller.clone(), path.to_owned());
        if let Some(known) = self.lock_decisions().get(&key, Instant::now()) {
            return Ok(known);
        }
        let allowed = self
            .review(self.reviews.authorize(caller, path))
            .await
            .map_err(|error| {
                let user = excerpt(&caller.username);
                tracing::warn!("a SubjectAccessReview for user {user} failed: {error:#}");
                Refusal::ReviewFailed(format!("Authorization for user {user} failed"))
            })?;
        let ttl = if allowed { ALLOW_TTL } else { DENY_TTL };
        self.lock_decisions()
            .insert(key, allowed, Instant::now(), ttl);
        Ok(allowed)
    }

    /// Runs one review within [`MAX_REVIEWS`] and [`REVIEW_TIMEOUT`].
    async fn review<T>(&self, review: BoxFuture<'_, anyhow::Result<T>>) -> anyhow::Result<T> {
        let _permit = self.in_flight.acquire().await?;
        tokio::time::timeout(REVIEW_TIMEOUT, review)
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {REVIEW_TIMEOUT:?}"))?
    }

    fn lock_tokens(&self) -> std::sync::MutexGuard<'_, Expiring<[u8; 32], Option<Caller>>> {
        self.tokens.lock().expect("token cache poisoned by a panic")
    }

    fn lock_decisions(&self) -> std::sync::MutexGuard<'_, Expiring<(Caller, String), bool>> {
        self.decisions
            .lock()
            .expect("decision cache poisoned by a panic")
    }
}

/// The token of `Authorization: Bearer TOKEN`, when it is one and not too long.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && token.len() <= MAX_TOKEN_BYTES)
        .then_some(token)
}

/// The middleware in front of the guarded routes.
pub(crate) async fn guard(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    match gate.check(request.headers(), request.uri().path()).await {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::http::HeaderValue;

    use super::*;

    /// Knows one token, `good`, for `alice`, who may get `/metrics` only; counts reviews.
    #[derive(Default)]
    struct Scripted {
        authentications: AtomicUsize,
        authorizations: AtomicUsize,
        fail: std::sync::atomic::AtomicBool,
    }

    fn alice() -> Caller {
        Caller {
            username: "alice".into(),
            uid: None,
            groups: vec!["system:authenticated".into()],
            extra: BTreeMap::new(),
        }
    }

    impl Reviews for Scripted {
        fn authenticate<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, anyhow::Result<Option<Caller>>> {
            Box::pin(async move {
                self.authentications.fetch_add(1, Ordering::SeqCst);
                if self.fail.load(Ordering::SeqCst) {
                    anyhow::bail!("connection refused");
                }
                Ok((token == "good").then(alice))
            })
        }

        fn authorize<'a>(
            &'a self,
            caller: &'a Caller,
            path: &'a str,
        ) -> BoxFuture<'a, anyhow::Result<bool>> {
            Box::pin(async move {
                self.authorizations.fetch_add(1, Ordering::SeqCst);
                Ok(caller.username == "alice" && path == "/metrics")
            })
        }
    }

    fn with_token(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    fn gate() -> (Arc<Scripted>, Gate) {
        let reviews = Arc::new(Scripted::default());
        (reviews.clone(), Gate::new(reviews))
    }

    #[tokio::test]
    async fn a_missing_malformed_or_unknown_token_is_unauthenticated() {
        let (reviews, gate) = gate();
        let long = format!("Bearer {}", "x".repeat(MAX_TOKEN_BYTES + 1));
        for headers in [
            HeaderMap::new(),
            with_token("Basic Z29vZA=="),
            with_token("Bearer "),
            with_token(&long),
            with_token("Bearer bad"),
        ] {
            assert_eq!(
                gate.check(&headers, "/metrics").await,
                Err(Refusal::Unauthenticated),
                "{headers:?}"
            );
        }
        // Only the well-formed unknown token was reviewed.
        assert_eq!(reviews.authentications.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_known_caller_gets_what_it_is_allowed_and_is_forbidden_the_rest() {
        let (_, gate) = gate();
        assert_eq!(
            gate.check(&with_token("Bearer good"), "/metrics").await,
            Ok(())
        );
        assert_eq!(
            gate.check(&with_token("bearer good"), "/metrics").await,
            Ok(())
        );
        assert_eq!(
            gate.check(&with_token("Bearer good"), "/plugins").await,
            Err(Refusal::Forbidden {
                username: "alice".into()
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_cached_for_their_time_to_live() {
        let (reviews, gate) = gate();
        let good = with_token("Bearer good");
        for _ in 0..10 {
            gate.check(&good, "/metrics").await.unwrap();
            gate.check(&good, "/plugins").await.unwrap_err();
            gate.check(&with_token("Bearer bad"), "/metrics")
                .await
                .unwrap_err();
        }
        let counts = || {
            (
                reviews.authentications.load(Ordering::SeqCst),
                reviews.authorizations.load(Ordering::SeqCst),
            )
        };
        assert_eq!(counts(), (2, 2), "one review per token, one per path");
        // Tokens and denials expire first; the allowed access stays.
        tokio::time::advance(DENY_TTL.max(TOKEN_TTL) + Duration::from_secs(1)).await;
        gate.check(&good, "/metrics").await.unwrap();
        gate.check(&good, "/plugins").await.unwrap_err();
        assert_eq!(counts(), (3, 3));
        tokio::time::advance(ALLOW_TTL).await;
        gate.check(&good, "/metrics").await.unwrap();
        assert_eq!(counts(), (4, 4));
    }

    #[tokio::test]
    async fn a_failed_review_is_an_error_and_not_remembered() {
        let (reviews, gate) = gate();
        reviews.fail.store(true, Ordering::SeqCst);
        let good = with_token("Bearer good");
        assert_eq!(
            gate.check(&good, "/metrics").await,
            Err(Refusal::ReviewFailed("Authentication failed".into()))
        );
        reviews.fail.store(false, Ordering::SeqCst);
        assert_eq!(gate.check(&good, "/metrics").await, Ok(()));
    }

    #[test]
    fn a_full_cache_keeps_its_bound() {
        let mut cache = Expiring(HashMap::new());
        let now = Instant::now();
        for i in 0..CACHE_ENTRIES * 3 {
            cache.insert(i, (), now, TOKEN_TTL);
            assert!(cache.0.len() <= CACHE_ENTRIES);
        }
        assert_eq!(cache.get(&(CACHE_ENTRIES * 3 - 1), now), Some(()));
    }
}
