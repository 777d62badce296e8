//! Authentication at the WebSocket upgrade: a signed token (JWT) from the
//! `Authorization: Bearer` header or the `token` query parameter (browsers cannot set
//! headers on a WebSocket), checked with `jsonwebtoken` against an HS256 secret or the
//! RS256/ES256 keys of a JWKS file; expiry is required and `aud` is checked. What a token
//! grants is decided in Postgres from its claims (see `access`).

use std::path::Path;

use anyhow::{bail, Context};
use axum::http::HeaderMap;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use samod::PeerId;
use serde_json::{Map, Value};

/// The query parameter a browser passes its token in: `ws://host:3030/?token=…`.
pub const TOKEN_PARAMETER: &str = "token";

/// Peer ids of anonymous clients start with this; a token's peer id may not.
pub const ANONYMOUS_PEER_PREFIX: &str = "anonymous-";

/// The query parameter an anonymous client names its peer id in (it must match the id
/// its repo announces, and start with [`ANONYMOUS_PEER_PREFIX`]).
pub const PEER_PARAMETER: &str = "peer_id";

/// Who a connection is: its peer id and the claims Postgres decides with.
#[derive(Clone, Debug, PartialEq)]
pub struct Identity {
    pub peer_id: PeerId,
    /// The database role `SET LOCAL ROLE` switches to (the `role` claim).
    pub role: String,
    /// Every claim, as `request.jwt.claims` carries them.
    pub claims: Value,
}

/// The keys tokens are checked with, and what they must say.
pub struct Verifier {
    keys: Keys,
    audience: Option<String>,
    peer_id_claim: String,
    /// The role of tokens without a `role` claim, and of anonymous clients.
    anonymous_role: Option<String>,
}

enum Keys {
    Secret(DecodingKey),
    Jwks(JwkSet),
}

impl Verifier {
    /// Reads the HS256 secret (the file's bytes, less a trailing newline) or the JWKS.
    pub fn new(
        secret_file: Option<&Path>,
        jwks_file: Option<&Path>,
        audience: Option<String>,
        peer_id_claim: String,
        anonymous_role: Option<String>,
    ) -> anyhow::Result<Verifier> {
        let keys = match (secret_file, jwks_file) {
            (Some(path), None) => Keys::Secret(DecodingKey::from_secret(&read_secret(path)?)),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading --jwks-file {}", path.display()))?;
                let set: JwkSet = serde_json::from_str(&text)
                    .with_context(|| format!("{} is not a JWKS (RFC 7517)", path.display()))?;
                if set.keys.is_empty() {
                    bail!("the JWKS in {} has no keys", path.display());
                }
                Keys::Jwks(set)
            }
            _ => bail!("give one of --jwt-secret-file and --jwks-file"),
        };
        Ok(Verifier { keys, audience, peer_id_claim, anonymous_role })
    }

    /// The identity a token proves, or why it proves none (for the log: the client gets
    /// a bare 401).
    pub fn verify(&self, token: &str) -> anyhow::Result<Identity> {
        let header = jsonwebtoken::decode_header(token)?;
        let key = match (&self.keys, header.alg) {
            (Keys::Secret(key), Algorithm::HS256) => key.clone(),
            (Keys::Jwks(set), Algorithm::RS256 | Algorithm::ES256) => {
                let jwk = match &header.kid {
                    Some(kid) => set.find(kid).context("no key of the JWKS has the token's kid")?,
                    None if set.keys.len() == 1 => &set.keys[0],
                    None => bail!("the token names no kid and the JWKS has several keys"),
                };
                DecodingKey::from_jwk(jwk)?
            }
            (_, alg) => bail!("tokens signed with {alg:?} are not accepted here"),
        };
        let mut validation = Validation::new(header.alg);
        validation.set_required_spec_claims(&["exp"]);
        validation.leeway = 0;
        if let Some(audience) = &self.audience {
            validation.set_audience(&[audience]);
            validation.set_required_spec_claims(&["exp", "aud"]);
        }
        let claims: Map<String, Value> = jsonwebtoken::decode(token, &key, &validation)?.claims;
        let peer_id = match claims.get(&self.peer_id_claim) {
            Some(Value::String(id)) if !id.is_empty() => id.clone(),
            _ => bail!("the token has no `{}` claim (its peer id)", self.peer_id_claim),
        };
        if peer_id.starts_with(ANONYMOUS_PEER_PREFIX) {
            bail!("a token's peer id may not start with {ANONYMOUS_PEER_PREFIX}");
        }
        let role = match (claims.get("role"), &self.anonymous_role) {
            (Some(Value::String(role)), _) => role.clone(),
            (None, Some(role)) => role.clone(),
            _ => bail!("the token has no `role` claim and there is no --anonymous-role"),
        };
        Ok(Identity { peer_id: PeerId::from(peer_id), role, claims: Value::Object(claims) })
    }

    /// The identity of a client without a token, when anonymous clients are let in: the
    /// anonymous role, no claims, and the peer id it named in the query.
    pub fn anonymous(&self, peer_id: Option<&str>) -> Option<Identity> {
        let role = self.anonymous_role.clone()?;
        let peer_id = peer_id.filter(|id| {
            id.len() > ANONYMOUS_PEER_PREFIX.len() && id.starts_with(ANONYMOUS_PEER_PREFIX)
        })?;
        Some(Identity { peer_id: PeerId::from(peer_id), role, claims: Value::Object(Map::new()) })
    }
}

/// The HS256 secret of a file: its bytes less a trailing newline, at least 32 of them.
fn read_secret(path: &Path) -> anyhow::Result<Vec<u8>> {
    let mut secret = std::fs::read(path)
        .with_context(|| format!("reading the JWT secret file {}", path.display()))?;
    if secret.ends_with(b"\n") {
        secret.pop();
    }
    if secret.len() < 32 {
        bail!("the JWT secret in {} is shorter than 32 bytes", path.display());
    }
    Ok(secret)
}

/// A token signed with the HS256 secret of `mint`, valid from now.
pub fn mint(mint: &crate::config::MintToken) -> anyhow::Result<String> {
    let secret = read_secret(&mint.jwt_secret_file)?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let mut claims = serde_json::json!({
        "sub": mint.sub,
        "role": mint.role,
        "exp": now + mint.expires_in_seconds,
    });
    if let Some(audience) = &mint.audience {
        claims["aud"] = Value::String(audience.clone());
    }
    let key = jsonwebtoken::EncodingKey::from_secret(&secret);
    Ok(jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key)?)
}

/// The token of a request: the bearer token of its `Authorization` header, else its
/// `token` query parameter.
pub fn token<'a>(headers: &'a HeaderMap, query: &'a [(String, String)]) -> Option<&'a str> {
    let bearer = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    bearer.or_else(|| parameter(query, TOKEN_PARAMETER))
}

pub fn parameter<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use jsonwebtoken::{EncodingKey, Header};
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
    use serde_json::json;

    use super::*;

    const SECRET: &[u8] = b"a test secret that is long enough to sign with";

    fn now() -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
    }

    /// A file of its own for each call: tests run in parallel, and one rewriting a file
    /// another reads would hand it a truncated secret.
    fn file(name: &str, contents: &[u8]) -> std::path::PathBuf {
        static FILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("sync-auth-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    fn secret_verifier(audience: Option<&str>) -> Verifier {
        let path = file("secret", SECRET);
        Verifier::new(Some(&path), None, audience.map(str::to_string), "sub".into(), None).unwrap()
    }

    fn hs256(claims: Value, secret: &[u8]) -> String {
        jsonwebtoken::encode(&Header::default(), &claims, &EncodingKey::from_secret(secret))
            .unwrap()
    }

    #[test]
    fn a_valid_token_gives_its_peer_id_role_and_claims() {
        let claims = json!({"sub": "ana", "role": "app_user", "exp": now() + 60, "team": 7});
        let identity = secret_verifier(None).verify(&hs256(claims.clone(), SECRET)).unwrap();
        assert_eq!(identity.peer_id, PeerId::from("ana"));
        assert_eq!(identity.role, "app_user");
        assert_eq!(identity.claims, claims);
    }

    #[test]
    fn bad_tokens_are_refused() {
        let verifier = secret_verifier(Some("sync"));
        let good = json!({"sub": "ana", "role": "r", "aud": "sync", "exp": now() + 60});
        assert!(verifier.verify(&hs256(good.clone(), SECRET)).is_ok());
        let expired = json!({"sub": "ana", "role": "r", "aud": "sync", "exp": now() - 5});
        let wrong_audience = json!({"sub": "ana", "role": "r", "aud": "other", "exp": now() + 60});
        let no_audience = json!({"sub": "ana", "role": "r", "exp": now() + 60});
        let no_expiry = json!({"sub": "ana", "role": "r", "aud": "sync"});
        let no_role = json!({"sub": "ana", "aud": "sync", "exp": now() + 60});
        let anonymous_id =
            json!({"sub": "anonymous-x", "role": "r", "aud": "sync", "exp": now() + 60});
        for claims in [expired, wrong_audience, no_audience, no_expiry, no_role, anonymous_id] {
            assert!(verifier.verify(&hs256(claims.clone(), SECRET)).is_err(), "{claims}");
        }
        let other_secret = hs256(good.clone(), b"another secret, just as long as the first");
        assert!(verifier.verify(&other_secret).is_err());
        assert!(verifier.verify("not.a.token").is_err());
        // An unsigned token (alg none) is refused.
        let unsigned = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#),
            URL_SAFE_NO_PAD.encode(good.to_string())
        );
        assert!(verifier.verify(&unsigned).is_err());
        // A token with an audience is refused by a server that expects none.
        let with_audience =
            hs256(json!({"sub": "a", "role": "r", "aud": "sync", "exp": now() + 60}), SECRET);
        assert!(secret_verifier(None).verify(&with_audience).is_err());
    }

    #[test]
    fn es256_tokens_are_checked_with_the_jwks() {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        // The public key is 0x04, x, y (32 bytes each).
        let point = pair.public_key().as_ref();
        let jwks = json!({"keys": [{
            "kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256", "use": "sig",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..]),
        }]});
        let path = file("jwks.json", jwks.to_string().as_bytes());
        let verifier = Verifier::new(None, Some(&path), None, "sub".into(), None).unwrap();
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some("k1".into());
        let claims = json!({"sub": "ana", "role": "r", "exp": now() + 60});
        let key = EncodingKey::from_ec_der(pkcs8.as_ref());
        let token = jsonwebtoken::encode(&header, &claims, &key).unwrap();
        assert_eq!(verifier.verify(&token).unwrap().peer_id, PeerId::from("ana"));
        header.kid = Some("k2".into());
        assert!(verifier.verify(&jsonwebtoken::encode(&header, &claims, &key).unwrap()).is_err());
        // An HS256 token, even one signed with the public key's bytes, is refused.
        assert!(verifier.verify(&hs256(claims, point)).is_err());
    }

    #[test]
    fn short_secrets_and_empty_key_sets_are_refused() {
        let short = file("short", b"too short\n");
        assert!(Verifier::new(Some(&short), None, None, "sub".into(), None).is_err());
        let empty = file("empty.json", br#"{"keys": []}"#);
        assert!(Verifier::new(None, Some(&empty), None, "sub".into(), None).is_err());
    }

    #[test]
    fn anonymous_clients_need_the_role_and_a_prefixed_peer_id() {
        let path = file("secret2", SECRET);
        let open =
            Verifier::new(Some(&path), None, None, "sub".into(), Some("anon".into())).unwrap();
        assert_eq!(open.anonymous(Some("anonymous-7")).unwrap().role, "anon");
        assert!(open.anonymous(Some("ana")).is_none());
        assert!(open.anonymous(None).is_none());
        assert!(secret_verifier(None).anonymous(Some("anonymous-7")).is_none());
    }

    #[test]
    fn the_token_comes_from_the_header_or_the_query() {
        let mut headers = HeaderMap::new();
        let query = vec![("token".to_string(), "from-query".to_string())];
        assert_eq!(token(&headers, &query), Some("from-query"));
        headers.insert(axum::http::header::AUTHORIZATION, "Bearer from-header".parse().unwrap());
        assert_eq!(token(&headers, &query), Some("from-header"));
        assert_eq!(token(&HeaderMap::new(), &[]), None);
    }
}
