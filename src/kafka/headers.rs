//! Record headers as bytes, read from and written to librdkafka without a text check.
//!
//! Kafka's protocol carries a header key as a length and bytes; nothing makes them UTF-8, and a
//! plain produce request can send `\xff\xfe`. rust-rdkafka's `Headers::get`/`iter` turn the key
//! into a `&str` and panic when it is not UTF-8, and `OwnedHeaders::insert` takes only `&str`
//! keys. A record is input, and input must never reach a panic: so keys are read and written
//! here through librdkafka's own calls, as bytes, and every consumer of a header (the headers
//! metadata column, the dead-letter producer) decides what a key that is not text means.
//!
//! librdkafka keeps a key as a NUL-terminated copy: a key is read up to its first NUL byte.

use std::ffi::{CStr, c_char, c_void};
use std::ptr;

use bytes::Bytes;
use rdkafka::bindings as rdsys;
use rdkafka::message::{BorrowedMessage, OwnedHeaders};
use rdkafka::types::RDKafkaRespErr;

/// One header of a record: its key and value as the producer sent them (a null value is
/// `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

/// The headers of `message`, copied out as bytes; empty when it has none.
pub fn read(message: &BorrowedMessage<'_>) -> Vec<Header> {
    let mut headers: *mut rdsys::rd_kafka_headers_t = ptr::null_mut();
    // SAFETY: `message.ptr()` is the live message the borrow holds; librdkafka parses its
    // headers on first use and keeps them owned by the message, which outlives this call.
    let err = unsafe { rdsys::rd_kafka_message_headers(message.ptr(), &mut headers) };
    if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR || headers.is_null() {
        return Vec::new();
    }
    // SAFETY: `headers` is the message's, valid while the message is.
    unsafe { copy_all(headers) }
}

/// Copies every header of `headers`.
///
/// # Safety
/// `headers` must be a valid librdkafka header list for the duration of the call.
unsafe fn copy_all(headers: *const rdsys::rd_kafka_headers_t) -> Vec<Header> {
    // SAFETY: the caller's promise.
    let count = unsafe { rdsys::rd_kafka_header_cnt(headers) };
    let mut out = Vec::with_capacity(count);
    for idx in 0..count {
        let mut name: *const c_char = ptr::null();
        let mut value: *const c_void = ptr::null();
        let mut size: usize = 0;
        // SAFETY: `idx` is below the count; the out-pointers are valid locals.
        let err = unsafe {
            rdsys::rd_kafka_header_get_all(headers, idx, &mut name, &mut value, &mut size)
        };
        if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            break;
        }
        // SAFETY: librdkafka's header names are NUL-terminated and live with the list; a
        // value is `size` bytes at `value`, or null for a null value.
        let key = Bytes::copy_from_slice(unsafe { CStr::from_ptr(name) }.to_bytes());
        let value = (!value.is_null()).then(|| {
            Bytes::copy_from_slice(unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) })
        });
        out.push(Header { key, value });
    }
    out
}

/// Adds a header whose key is any bytes to `headers`.
pub fn add(headers: &mut OwnedHeaders, key: &[u8], value: Option<&[u8]>) {
    // rust-rdkafka offers no `&[u8]` key, and its list's pointer only through the borrowed view,
    // whose address is the native list (`OwnedHeaders::as_borrowed` casts the pointer).
    let list = headers.as_borrowed() as *const _ as *mut rdsys::rd_kafka_headers_t;
    let (value_ptr, value_len) = match value {
        Some(v) => (v.as_ptr().cast::<c_void>(), v.len() as isize),
        None => (ptr::null(), 0),
    };
    // SAFETY: `list` is the writable list `headers` owns (the `&mut` excludes other users);
    // librdkafka copies the key and value before returning.
    let err = unsafe {
        rdsys::rd_kafka_header_add(
            list,
            key.as_ptr().cast::<c_char>(),
            key.len() as isize,
            value_ptr,
            value_len,
        )
    };
    // Only a read-only list (one attached to a message already sent) refuses an add, and an
    // `OwnedHeaders` is never one.
    debug_assert_eq!(err, RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR);
}

/// The headers of an [`OwnedHeaders`] list, as bytes (tests and the dead-letter checks).
pub fn of_owned(headers: &OwnedHeaders) -> Vec<Header> {
    let list = headers.as_borrowed() as *const _ as *const rdsys::rd_kafka_headers_t;
    // SAFETY: the list `headers` owns, alive for the call.
    unsafe { copy_all(list) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_that_is_not_utf8_goes_through_as_bytes() {
        let mut headers = OwnedHeaders::new();
        add(&mut headers, b"\xff\xfe", Some(b"v"));
        add(&mut headers, b"trace", None);
        add(&mut headers, b"empty", Some(b""));
        assert_eq!(
            of_owned(&headers),
            vec![
                Header {
                    key: Bytes::from_static(b"\xff\xfe"),
                    value: Some(Bytes::from_static(b"v")),
                },
                Header {
                    key: Bytes::from_static(b"trace"),
                    value: None,
                },
                Header {
                    key: Bytes::from_static(b"empty"),
                    value: Some(Bytes::new()),
                },
            ]
        );
    }
}
