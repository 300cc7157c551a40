//! The config's value types: durations and sizes written with units, secrets that never print,
//! and librdkafka property maps.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A duration written with a unit: `250ms`, `5s`, `2m`, `1h`, `7d` or a sum such as `1m30s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "invalid duration `{s}`: use a number with a unit (ms, s, m, h, d), e.g. 5s or 250ms"
            )
        };
        let text = s.trim();
        if text.is_empty() {
            return Err(bad());
        }
        let mut total = Duration::ZERO;
        let mut rest = text;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(bad());
            }
            let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
            rest = &rest[digits..];
            let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            let unit = &rest[..unit_len];
            rest = &rest[unit_len..];
            let part = match unit {
                "ms" => Duration::from_millis(n),
                "s" => Duration::from_secs(n),
                "m" => n.checked_mul(60).map(Duration::from_secs).ok_or_else(bad)?,
                "h" => n
                    .checked_mul(3600)
                    .map(Duration::from_secs)
                    .ok_or_else(bad)?,
                "d" => n
                    .checked_mul(86_400)
                    .map(Duration::from_secs)
                    .ok_or_else(bad)?,
                _ => return Err(bad()),
            };
            total = total.checked_add(part).ok_or_else(bad)?;
        }
        Ok(HumanDuration(total))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if !ms.is_multiple_of(1000) || ms == 0 {
            write!(f, "{ms}ms")
        } else {
            write!(f, "{}s", ms / 1000)
        }
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = HumanDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration with a unit, e.g. 5s or 250ms")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<HumanDuration, E> {
                HumanDuration::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<HumanDuration, E> {
                Err(E::custom(format!(
                    "invalid duration `{v}`: add a unit (ms, s, m, h, d), e.g. {v}s"
                )))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<HumanDuration, E> {
                Err(E::custom(format!(
                    "invalid duration `{v}`: add a unit, e.g. 5s"
                )))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<HumanDuration, E> {
                Err(E::custom(format!(
                    "invalid duration `{v}`: use a whole number with a unit, e.g. 1500ms"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

/// A byte size: a plain number of bytes or a number with a unit, `KiB`/`MiB`/`GiB` (powers of
/// 1024) or `KB`/`MB`/`GB` (powers of 1000): `8MiB`, `512 KiB`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "invalid size `{s}`: use bytes or a number with a unit (KiB, MiB, GiB, KB, MB, GB), e.g. 8MiB"
            )
        };
        let text = s.trim();
        let digits = text.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = text[..digits].parse().map_err(|_| bad())?;
        let factor: u64 = match text[digits..].trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kib" => 1 << 10,
            "mib" => 1 << 20,
            "gib" => 1 << 30,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            _ => return Err(bad()),
        };
        n.checked_mul(factor).map(ByteSize).ok_or_else(bad)
    }

    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
            if b >= size && b.is_multiple_of(size) {
                return write!(f, "{}{unit}", b / size);
            }
        }
        write!(f, "{b}B")
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size in bytes or with a unit, e.g. 8MiB")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("invalid size `{v}`: must not be negative")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A secret (password, token): never printed, not even by `Debug`, so that a logged config
/// cannot leak it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// librdkafka properties. `Debug` hides the values of secret ones (passwords, keys, JAAS and
/// OAUTHBEARER configs), so that a logged config or property list cannot leak them.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Properties(pub BTreeMap<String, String>);

impl Properties {
    /// Whether the value of `key` may be a credential: passwords, secrets, tokens, private
    /// keys, PEM blocks, JAAS and OAUTHBEARER configs. Misspelt keys are judged by the same
    /// words, so `sasl.pasword` is still hidden.
    pub fn is_secret(key: &str) -> bool {
        let key = key.to_ascii_lowercase();
        [
            "pass",
            "pasw",
            "pwd",
            "secret",
            "token",
            "private",
            "credential",
            "jaas",
            "oauthbearer.config",
        ]
        .iter()
        .any(|word| key.contains(word))
            || key.ends_with(".pem")
            || key.contains(".key")
    }
}

impl std::ops::Deref for Properties {
    type Target = BTreeMap<String, String>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Properties {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl fmt::Debug for Properties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| {
                let shown = if Properties::is_secret(k) {
                    "<redacted>"
                } else {
                    v.as_str()
                };
                (k, shown)
            }))
            .finish()
    }
}
