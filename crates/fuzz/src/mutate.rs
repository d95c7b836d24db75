//! The mutator: byte-level edits plus Matrix Market, JSON and multipart tokens
//! (huge numbers, whitespace variants, gzip magic, banner words), and splices
//! of two inputs.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Tokens worth inserting: the words and numbers the readers branch on.
const TOKENS: &[&[u8]] = &[
    b"%%MatrixMarket",
    b"matrix",
    b"coordinate",
    b"array",
    b"real",
    b"double",
    b"integer",
    b"pattern",
    b"complex",
    b"general",
    b"symmetric",
    b"skew-symmetric",
    b"hermitian",
    b"\t",
    b"  ",
    b"\r\n",
    b"\r",
    b"\n",
    b"\n%",
    b"%",
    b"\xEF\xBB\xBF",
    b"\x1f\x8b",
    b"0",
    b"-1",
    b"1e308",
    b"-1e308",
    b"1e-320",
    b"inf",
    b"nan",
    b"4294967295",
    b"4294967296",
    b"2147483647",
    b"2147483648",
    b"50000000",
    b"18446744073709551616",
    b"99999999999999999999999999",
    b"1.5",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"null",
    b"\"nrows\"",
    b"\"ncols\"",
    b"\"row_ptr\"",
    b"\"col_idx\"",
    b"\"values\"",
    b"\"x\"",
    b"\"matrix\"",
    b"\"matrix_id\"",
    b"\"precision\"",
    b"\"f32\"",
    b"\"verify\"",
    b"--B",
    b"--B--",
    b"\r\n--B\r\n",
    b"Content-Disposition: form-data; name=\"matrix\"\r\n\r\n",
    b"Content-Disposition: form-data; name=\"x\"\r\n\r\n",
    b"Content-Type: application/json\r\n",
];

/// Applies 1 to 8 random edits to `input`, maybe splicing in part of `other`;
/// the result is kept under `max_len` bytes.
pub fn mutate(rng: &mut ChaCha8Rng, input: &[u8], other: &[u8], max_len: usize) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..rng.gen_range(1..=8) {
        edit(rng, &mut v, other);
    }
    v.truncate(max_len);
    v
}

fn edit(rng: &mut ChaCha8Rng, v: &mut Vec<u8>, other: &[u8]) {
    let at = |rng: &mut ChaCha8Rng, v: &Vec<u8>| rng.gen_range(0..=v.len());
    match rng.gen_range(0..10) {
        0 if !v.is_empty() => {
            let i = rng.gen_range(0..v.len());
            v[i] ^= 1 << rng.gen_range(0..8);
        }
        1 if !v.is_empty() => {
            let i = rng.gen_range(0..v.len());
            v[i] = *[0u8, b' ', b'\n', b'9', b'%', b'.', b'-', 0xff, b'e']
                .get(rng.gen_range(0..9))
                .unwrap_or(&0);
        }
        2 | 3 => {
            let i = at(rng, v);
            let t = TOKENS[rng.gen_range(0..TOKENS.len())];
            v.splice(i..i, t.iter().copied());
        }
        4 if !v.is_empty() => {
            let i = rng.gen_range(0..v.len());
            let n = rng.gen_range(1..=(v.len() - i).min(64));
            v.drain(i..i + n);
        }
        5 if !v.is_empty() => {
            let i = rng.gen_range(0..v.len());
            let n = rng.gen_range(1..=(v.len() - i).min(256));
            let copy: Vec<u8> = v[i..i + n].to_vec();
            let j = at(rng, v);
            v.splice(j..j, copy);
        }
        6 if !other.is_empty() => {
            let i = rng.gen_range(0..other.len());
            let n = rng.gen_range(1..=(other.len() - i).min(512));
            let j = at(rng, v);
            v.truncate(j);
            v.extend_from_slice(&other[i..i + n]);
        }
        7 => replace_number(rng, v),
        8 if !v.is_empty() => {
            // Truncate: files that end early.
            let i = rng.gen_range(0..v.len());
            v.truncate(i);
        }
        _ => {
            let i = at(rng, v);
            let t = TOKENS[rng.gen_range(0..TOKENS.len())];
            v.splice(i..i, t.iter().copied());
        }
    }
}

/// Replaces a run of digits with another number (often a huge or edge one).
fn replace_number(rng: &mut ChaCha8Rng, v: &mut Vec<u8>) {
    let digits: Vec<usize> = (0..v.len()).filter(|&i| v[i].is_ascii_digit()).collect();
    if digits.is_empty() {
        return;
    }
    let s = digits[rng.gen_range(0..digits.len())];
    let e = (s..v.len())
        .find(|&i| !v[i].is_ascii_digit())
        .unwrap_or(v.len());
    let n: u64 = match rng.gen_range(0..4) {
        0 => rng.gen_range(0..4),
        1 => rng.gen_range(0..100_000),
        2 => 1u64 << rng.gen_range(20..64),
        _ => rng.gen(),
    };
    v.splice(s..e, n.to_string().into_bytes());
}
