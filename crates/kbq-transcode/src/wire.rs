//! Record framing on the Kafka side: the Confluent wire format (magic byte 0, a big-endian
//! 4-byte schema id, then Avro binary) or raw Avro binary with a fixed writer schema.

use serde::Deserialize;

use super::error::RecordError;

/// How record values are framed, chosen in config.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireFormat {
    /// Confluent framing; the writer schema comes from the Schema Registry by id.
    #[default]
    Confluent,
    /// Bare Avro binary written with the `.avsc` schema named in config.
    Raw,
}

pub const CONFLUENT_MAGIC: u8 = 0;
pub const CONFLUENT_HEADER_LEN: usize = 5;

/// Splits a Confluent-framed payload into its schema id and the Avro body.
pub fn split_confluent(payload: &[u8]) -> Result<(u32, &[u8]), RecordError> {
    let Some((header, body)) = payload.split_first_chunk::<CONFLUENT_HEADER_LEN>() else {
        return Err(RecordError::ShortHeader { len: payload.len() });
    };
    if header[0] != CONFLUENT_MAGIC {
        return Err(RecordError::BadMagic { found: header[0] });
    }
    let id = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    Ok((id, body))
}

/// Frames an Avro body the way Confluent serializers do (for tests, tools and the quickstart).
pub fn frame_confluent(schema_id: u32, avro: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(CONFLUENT_HEADER_LEN + avro.len());
    out.push(CONFLUENT_MAGIC);
    out.extend_from_slice(&schema_id.to_be_bytes());
    out.extend_from_slice(avro);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_magic_zero_and_a_big_endian_id() {
        let framed = frame_confluent(0x0102_0304, b"avro");
        assert_eq!(&framed[..5], &[0, 1, 2, 3, 4]);
        assert_eq!(
            split_confluent(&framed).unwrap(),
            (0x0102_0304, &b"avro"[..])
        );
    }

    #[test]
    fn short_and_foreign_payloads_are_typed_errors() {
        assert_eq!(
            split_confluent(&[0, 0, 1]),
            Err(RecordError::ShortHeader { len: 3 })
        );
        assert_eq!(
            split_confluent(b"{\"json\":1}"),
            Err(RecordError::BadMagic { found: b'{' })
        );
        assert_eq!(split_confluent(&[0, 0, 0, 0, 7]).unwrap(), (7, &[][..]));
    }
}
