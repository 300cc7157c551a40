//! The executors the product runs against the ones they replaced, on every record a test
//! transcodes: the same rows byte for byte, the same errors (`tests/transcode/differential.rs`;
//! JSON's own comparison is `tests/transcode/json_differential.rs`).

use std::ops::Range;

use kbq_transcode::{KafkaMetadata, Plan, RecordError};

pub trait Both {
    /// [`Plan::transcode`], after checking that the reference (Avro's tree executor,
    /// Protobuf's `protobuf/exec.rs`, JSON's `json/reference.rs`) gives the same result and
    /// leaves the same bytes.
    fn transcode_both(
        &self,
        body: &[u8],
        meta: Option<&KafkaMetadata<'_>>,
        out: &mut Vec<u8>,
    ) -> Result<Range<usize>, RecordError>;
}

impl Both for Plan {
    fn transcode_both(
        &self,
        body: &[u8],
        meta: Option<&KafkaMetadata<'_>>,
        out: &mut Vec<u8>,
    ) -> Result<Range<usize>, RecordError> {
        let mut reference = out.clone();
        let expected = self.transcode_reference(body, meta, &mut reference);
        let got = self.transcode(body, meta, out);
        assert_eq!(got, expected, "the executors disagree on {}", hex(body));
        assert!(
            *out == reference,
            "the executors' rows differ on {}",
            hex(body)
        );
        got
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
