//! The host CA: one Ed25519 key, unencrypted, in OpenSSH's private key
//! format (what `ssh-keygen -t ed25519 -N ''` writes), so an operator can
//! supply their own. Anything else is refused with what to do instead;
//! nothing is ever signed with a key that was not checked here.

use ssh_key::{Algorithm, LineEnding, PrivateKey, PublicKey, rand_core::OsRng};
use zeroize::Zeroizing;

/// The host CA's signing key.
#[derive(Clone)]
pub struct Ca {
    key: PrivateKey,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the private half.
        f.debug_struct("Ca")
            .field("public", &self.public_line())
            .finish()
    }
}

/// Why a CA key was refused; `what` names where it came from (e.g.
/// "Secret ssh-fwd/ssh-fwd-host-ca, key ssh_host_ca_key").
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CaError {
    #[error(
        "{what} is not an OpenSSH private key ({why}); put one there made by `ssh-keygen -t ed25519 -N '' -f host_ca`, or delete the Secret and the controller makes a new CA"
    )]
    Malformed { what: String, why: String },
    #[error(
        "{what} is a {algorithm} key; the host CA must be Ed25519: make one with `ssh-keygen -t ed25519 -N '' -f host_ca`, or delete the Secret and the controller makes a new CA"
    )]
    NotEd25519 { what: String, algorithm: String },
    #[error(
        "{what} is encrypted with a passphrase, which the controller cannot type; remove it (`ssh-keygen -p -N '' -f host_ca`) or delete the Secret and the controller makes a new CA"
    )]
    Encrypted { what: String },
}

impl Ca {
    /// A new random CA key, commented `comment`.
    pub fn generate(comment: &str) -> Result<Self, ssh_key::Error> {
        let mut key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519)?;
        key.set_comment(comment);
        Ok(Self { key })
    }

    /// The CA key from its OpenSSH text, checked.
    pub fn from_openssh(text: &[u8], what: &str) -> Result<Self, CaError> {
        let key = PrivateKey::from_openssh(text).map_err(|e| CaError::Malformed {
            what: what.to_owned(),
            why: e.to_string(),
        })?;
        if key.is_encrypted() {
            return Err(CaError::Encrypted {
                what: what.to_owned(),
            });
        }
        if key.algorithm() != Algorithm::Ed25519 {
            return Err(CaError::NotEd25519 {
                what: what.to_owned(),
                algorithm: key.algorithm().to_string(),
            });
        }
        Ok(Self { key })
    }

    /// The private key as OpenSSH writes it, for the CA Secret.
    pub fn to_openssh(&self) -> Result<Zeroizing<String>, ssh_key::Error> {
        self.key.to_openssh(LineEnding::LF)
    }

    pub fn public_key(&self) -> &PublicKey {
        self.key.public_key()
    }

    /// `ssh-ed25519 AAAA...` with no comment: what goes after a
    /// `@cert-authority` pattern.
    pub fn public_line(&self) -> String {
        public_line(self.key.public_key())
    }

    pub(super) fn signing_key(&self) -> &PrivateKey {
        &self.key
    }
}

/// `ALGORITHM BASE64` of a public key, without its comment.
pub fn public_line(key: &PublicKey) -> String {
    let mut bare = key.clone();
    bare.set_comment("");
    bare.to_openssh()
        .map(|s| s.trim_end().to_owned())
        .unwrap_or_default()
}

/// `ssh-keygen -t ecdsa -b 256 -N '' -C throwaway` (made for tests).
#[cfg(test)]
pub(crate) const ECDSA_TEST_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAaAAAABNlY2RzYS
1zaGEyLW5pc3RwMjU2AAAACG5pc3RwMjU2AAAAQQSVLkE9W4GSfpAmmu03vc+v2V1wGkh0
KJjzncGgIPxnNc/T9sMwvRum+b9OqIsjR61dZMwXZOSsP/pd3GSNE1FvAAAAqFD1VbRQ9V
W0AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBJUuQT1bgZJ+kCaa
7Te9z6/ZXXAaSHQomPOdwaAg/Gc1z9P2wzC9G6b5v06oiyNHrV1kzBdk5Kw/+l3cZI0TUW
8AAAAgEIKqbNYkfIdiymZACNZ1X71m6R/nzNUtu+Y5xpUSOyUAAAAJdGhyb3dhd2F5AQID
BAUGBw==
-----END OPENSSH PRIVATE KEY-----
";

/// `ssh-keygen -t ed25519 -N passphrase -C throwaway` (made for tests).
#[cfg(test)]
const ENCRYPTED_TEST_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAACmFlczI1Ni1jdHIAAAAGYmNyeXB0AAAAGAAAABBnw54Igs
Y4vvdRYLrQ1q9UAAAAEAAAAAEAAAAzAAAAC3NzaC1lZDI1NTE5AAAAIGKxASKvRXlyhLJJ
LM/cUOjqVjc8WLR77DbeyajtZCBcAAAAkLMr3edIJgb6VuuCPU1F/7/Z4NabonN+l8nBfW
peRxR463ELRNLMkzxSxU5Qx/6P/+DsiOwgCP9Ws6N4AHa351Qu547jn3el9A4YfpDNUEi+
VGe51/krHXuVdVwMwZggFX8utRjQKFrZvwUKKQElC+lu3P4mq8qwBaxSipDVZeaYNvG6u6
/3ZulBtTQ+XxQg8A==
-----END OPENSSH PRIVATE KEY-----
";

#[cfg(test)]
mod tests {
    use super::*;

    const WHAT: &str = "Secret ssh-fwd/ssh-fwd-host-ca, key ssh_host_ca_key";

    #[test]
    fn a_generated_ca_reads_back_as_the_same_key() {
        let ca = Ca::generate("ssh-fwd host CA").unwrap();
        let text = ca.to_openssh().unwrap();
        let back = Ca::from_openssh(text.as_bytes(), WHAT).unwrap();
        assert_eq!(back.public_line(), ca.public_line());
        assert!(ca.public_line().starts_with("ssh-ed25519 AAAA"));
        assert_eq!(ca.public_line().split(' ').count(), 2, "no comment");
        assert!(!format!("{ca:?}").contains("PRIVATE"), "{ca:?}");
    }

    #[test]
    fn a_malformed_key_is_refused_naming_the_secret_and_the_fix() {
        let error = Ca::from_openssh(b"not a key", WHAT).unwrap_err();
        assert!(matches!(error, CaError::Malformed { .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.starts_with(WHAT), "{message}");
        assert!(message.contains("ssh-keygen -t ed25519"), "{message}");
        assert!(message.contains("delete the Secret"), "{message}");
    }

    #[test]
    fn an_encrypted_key_is_refused_saying_how_to_remove_the_passphrase() {
        let error = Ca::from_openssh(ENCRYPTED_TEST_KEY.as_bytes(), WHAT).unwrap_err();
        assert!(matches!(error, CaError::Encrypted { .. }), "{error:?}");
        assert!(error.to_string().contains("ssh-keygen -p -N ''"), "{error}");
    }

    #[test]
    fn a_key_that_is_not_ed25519_is_refused_naming_its_type() {
        let error = Ca::from_openssh(ECDSA_TEST_KEY.as_bytes(), WHAT).unwrap_err();
        let CaError::NotEd25519 { algorithm, .. } = &error else {
            panic!("{error:?}");
        };
        assert!(algorithm.contains("ecdsa"), "{algorithm}");
        assert!(error.to_string().contains("must be Ed25519"), "{error}");
    }
}
