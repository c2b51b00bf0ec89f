//! `multipleOf`, decided exactly for every number a client can send.

use serde_json::{Value, json};

use super::super::Validator;

fn multiple(n: Value, m: Value) -> bool {
    Validator::new(&json!({"multipleOf": m}))
        .expect("compiles")
        .is_valid(&n)
}

#[test]
fn decimals_divide_as_written() {
    assert!(multiple(json!(0.0075), json!(0.0001)));
    assert!(!multiple(json!(0.00751), json!(0.0001)));
    assert!(multiple(json!(19.99), json!(0.01)));
    assert!(!multiple(json!(19.995), json!(0.01)));
    assert!(multiple(json!(0.3), json!(0.1)));
    // The sum 0.1 + 0.2 gives in binary is not 0.3, and was written with its own digits.
    assert!(!multiple(json!(0.1 + 0.2), json!(0.1)));
    assert!(multiple(json!(4.5), json!(1.5)));
    assert!(!multiple(json!(4.5), json!(2)));
    assert!(multiple(json!(-9), json!(3)));
    assert!(multiple(json!(-0.0), json!(7)));
    assert!(multiple(json!(0), json!(0.1)));
}

#[test]
fn no_magnitude_overflows_or_underflows() {
    assert!(multiple(json!(1e308), json!(0.5)));
    assert!(multiple(json!(1e308), json!(1e-308)));
    assert!(multiple(json!(f64::MAX), json!(5e-324)));
    assert!(multiple(json!(0.5), json!(5e-324)));
    assert!(multiple(json!(5e-324), json!(5e-324)));
    assert!(!multiple(json!(1e308), json!(0.123456789)));
    assert!(!multiple(json!(5e-324), json!(1e-8)));
    assert!(!multiple(json!(1e-300), json!(1e300)));
    assert!(multiple(json!(1e20), json!(5)));
    assert!(!multiple(json!(1e20), json!(3)));
}

#[test]
fn large_integers_divide_exactly() {
    // Past 2^53 a double's shortest decimal is a rounding of it (2^70 prints as
    // 1.1805916207174113e21); its exact value still divides.
    assert!(multiple(json!(2f64.powi(70)), json!(2f64.powi(69))));
    assert!(multiple(json!(2f64.powi(70)), json!(1024)));
    assert!(multiple(json!(u64::MAX), json!(5)));
    assert!(!multiple(json!(u64::MAX), json!(2)));
    assert!(multiple(json!(i64::MIN), json!(2f64.powi(63))));
    assert!(!multiple(json!(i64::MIN + 1), json!(2)));
}
