//! Property tests: any body verifies once signed, and fails once any one byte changes.

use std::time::{Duration, UNIX_EPOCH};

use proptest::prelude::*;
use tern_receiver::{Verifier, VerifyError, header};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn signed_verifies_and_one_byte_tampered_fails(
        body in proptest::collection::vec(any::<u8>(), 1..2048),
        id in "[A-Za-z0-9_-]{1,40}",
        ts in 0_i64..4_000_000_000,
        pos in any::<prop::sample::Index>(),
        flip in 1_u8..=255,
    ) {
        let v = Verifier::new(SECRET).unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(u64::try_from(ts).unwrap());
        let sig = v.sign(&id, ts, &body);
        let ts_s = ts.to_string();
        let h = [
            (header::WEBHOOK_ID, id.as_str()),
            (header::WEBHOOK_TIMESTAMP, ts_s.as_str()),
            (header::WEBHOOK_SIGNATURE, sig.as_str()),
        ];
        prop_assert!(v.verify(h, &body, now).is_ok());
        let body_sig = v.sign_body(&body);
        prop_assert_eq!(v.verify_body_signature([(header::X_WEBHOOK_SIGNATURE, body_sig.as_str())], &body), Ok(0));

        let mut tampered = body.clone();
        let i = pos.index(tampered.len());
        tampered[i] ^= flip;
        prop_assert_eq!(v.verify(h, &tampered, now), Err(VerifyError::NoValidSignature));
        prop_assert_eq!(
            v.verify_body_signature([(header::X_WEBHOOK_SIGNATURE, body_sig.as_str())], &tampered),
            Err(VerifyError::NoValidSignature)
        );
    }

    #[test]
    fn arbitrary_header_values_never_panic(
        id in ".{0,40}",
        ts in ".{0,25}",
        sig in ".{0,200}",
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let v = Verifier::new(SECRET).unwrap();
        let h = [
            (header::WEBHOOK_ID, id.as_str()),
            (header::WEBHOOK_TIMESTAMP, ts.as_str()),
            (header::WEBHOOK_SIGNATURE, sig.as_str()),
            (header::X_WEBHOOK_SIGNATURE, sig.as_str()),
        ];
        // Random input essentially never carries a valid MAC.
        prop_assert!(v.verify_now(h, &body).is_err());
        prop_assert!(v.verify_body_signature(h, &body).is_err());
    }
}
