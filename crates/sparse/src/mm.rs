//! Matrix Market reading and writing: every variant the SuiteSparse collection
//! ships, read fast and defensively, and a writer whose output reads back exactly.
//!
//! The reader accepts the `coordinate` format with the `real`, `double`, `integer`,
//! `pattern` (every entry is 1) and `complex` fields (only when the caller asks for
//! the real part, see [`ReadOptions`]), the `array` format (column-major dense;
//! the symmetric variants store the lower triangle), and the `general`,
//! `symmetric`, `skew-symmetric` and `hermitian` symmetries, which are expanded to
//! the full matrix: off-diagonal entries are mirrored, negated for skew-symmetric,
//! unchanged for hermitian (the real part of a conjugate is the same). Symmetric
//! coordinate entries are accepted in either triangle. Banners are matched
//! without regard to case; CRLF line ends, `%` comment lines and blank lines are
//! allowed anywhere after the banner. Gzip input is recognised by its magic bytes
//! (and by the `.gz` extension in [`read_path`]).
//!
//! Every problem is a [`SparseError::Parse`] naming the 1-based line and a
//! specific [`ParseErrorKind`]. The header is never trusted with memory: the one
//! header parser checks the declared sizes against [`SizeLimits`] and against
//! what the text after the size line can hold before anything is allocated
//! (see [`SizeLimits`] for the rule), so a 100-byte body declaring 50 million
//! rows is a [`ParseErrorKind::ExceedsData`] error, not an allocation. Gzip is
//! decoded in one layer only, with a cap on the decompressed bytes.
//!
//! Speed: the text is parsed as bytes (no per-line allocation, hand-written
//! integer parsing, `fast-float2` for values); large inputs are split at line
//! boundaries and parsed on all cores with rayon, then the CSR arrays are built
//! with one counting sort. Duplicate entries are summed, as [`Csr`] requires.

use crate::error::ParseErrorKind;
use crate::{Csr, Scalar, SparseError, MAX_DIM};
use rayon::prelude::*;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Options of the reader.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Accept `complex` matrices by keeping the real part of each entry (the
    /// imaginary part must still be a number). Without it, a complex file is a
    /// [`ParseErrorKind::ComplexNotAllowed`] error.
    pub complex_real_part: bool,
}

/// Sizes the reader refuses, checked on the size line before any allocation.
///
/// Besides these limits, the declared sizes must be ones the text can hold:
/// - entries (for `array`, the values the size implies) are at most
///   `(data bytes + 1) / L`, where `L` is the shortest possible entry line with
///   its line end (`1 1\n` = 4 bytes for pattern, 6 for real and integer, 8 for
///   complex coordinate; `1\n` = 2 for array, 4 for complex array), plus
///   [`ENTRY_SLACK`] so that a file a few lines short is reported as
///   [`ParseErrorKind::Truncated`] at the missing line;
/// - `rows + cols` is at most `max(DIM_FLOOR, DIMS_PER_BYTE * text bytes)`:
///   a coordinate matrix with few entries still costs `row_ptr`, x and y for
///   every declared row and column, so a tiny text may only declare a
///   moderate shape (4 Mi rows and columns together, about 100 MB of vectors
///   at worst), and larger shapes need proportionally more text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeLimits {
    /// Largest row count.
    pub max_rows: usize,
    /// Largest column count.
    pub max_cols: usize,
    /// Largest number of stored entries (after symmetric expansion).
    pub max_nnz: usize,
    /// Largest text, in bytes after gzip decompression.
    pub max_text_bytes: usize,
}

impl Default for SizeLimits {
    /// Only what 32-bit device indices allow, and no cap on the text.
    fn default() -> Self {
        SizeLimits {
            max_rows: MAX_DIM,
            max_cols: MAX_DIM,
            max_nnz: MAX_DIM,
            max_text_bytes: usize::MAX,
        }
    }
}

/// Entries a header may declare beyond what its text can hold (see [`SizeLimits`]).
pub const ENTRY_SLACK: usize = 1 << 16;

/// `rows + cols` any text may declare, however short (see [`SizeLimits`]).
pub const DIM_FLOOR: u64 = 1 << 22;

/// `rows + cols` allowed per byte of text beyond [`DIM_FLOOR`] (see [`SizeLimits`]).
pub const DIMS_PER_BYTE: u64 = 16;

/// What the banner and size line declare, as read by the reader's one header
/// parser ([`read_header`]); callers use it to estimate memory before parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declared {
    /// Rows.
    pub nrows: usize,
    /// Columns.
    pub ncols: usize,
    /// Entries stored in the file (for `array`, derived from the size).
    pub entries: usize,
    /// Whether off-diagonal entries are mirrored (so nnz may reach twice `entries`).
    pub mirrored: bool,
}

/// The first two bytes of every gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Data regions smaller than this are parsed on one thread.
const PARALLEL_MIN_BYTES: usize = 256 * 1024;

/// Target size of one parallel parse chunk.
const CHUNK_BYTES: usize = 256 * 1024;

/// Reads a Matrix Market file, gzip-compressed when its name ends in `.gz` or
/// when it starts with the gzip magic bytes.
pub fn read_path<T: Scalar>(path: &Path, opts: &ReadOptions) -> Result<Csr<T>, SparseError> {
    read_path_with(path, opts, &SizeLimits::default())
}

/// [`read_path`] with size limits.
pub fn read_path_with<T: Scalar>(
    path: &Path,
    opts: &ReadOptions,
    limits: &SizeLimits,
) -> Result<Csr<T>, SparseError> {
    let bytes = std::fs::read(path).map_err(|e| {
        SparseError::parse(
            0,
            ParseErrorKind::Io,
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    let gz_name = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    if gz_name || bytes.starts_with(&GZIP_MAGIC) {
        let text = gunzip_limited(&bytes, limits.max_text_bytes)?;
        read_text(&text, opts, limits)
    } else {
        read_text(&bytes, opts, limits)
    }
}

/// Whether a file's name says Matrix Market: it ends in `.mtx` or `.mtx.gz`.
pub fn is_matrix_file(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy());
    name.is_some_and(|n| n.ends_with(".mtx") || n.ends_with(".mtx.gz"))
}

/// The Matrix Market files directly in a folder ([`is_matrix_file`]), sorted
/// by path; an unreadable folder is a [`ParseErrorKind::Io`] error.
pub fn matrix_files(dir: &Path) -> Result<Vec<PathBuf>, SparseError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        SparseError::parse(
            0,
            ParseErrorKind::Io,
            format!("cannot list {}: {e}", dir.display()),
        )
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_matrix_file(p))
        .collect();
    files.sort();
    Ok(files)
}

/// Reads a Matrix Market file held in memory; gzip data (recognised by its
/// magic bytes) is decompressed first.
pub fn read_bytes<T: Scalar>(bytes: &[u8], opts: &ReadOptions) -> Result<Csr<T>, SparseError> {
    read_bytes_with(bytes, opts, &SizeLimits::default())
}

/// [`read_bytes`] with size limits: at most one gzip layer, whose output may
/// not exceed `limits.max_text_bytes`, and declared sizes within `limits`.
pub fn read_bytes_with<T: Scalar>(
    bytes: &[u8],
    opts: &ReadOptions,
    limits: &SizeLimits,
) -> Result<Csr<T>, SparseError> {
    if bytes.starts_with(&GZIP_MAGIC) {
        let text = gunzip_limited(bytes, limits.max_text_bytes)?;
        read_text(&text, opts, limits)
    } else {
        if bytes.len() > limits.max_text_bytes {
            return Err(text_too_large(bytes.len(), limits.max_text_bytes));
        }
        read_text(bytes, opts, limits)
    }
}

/// Reads a Matrix Market file held in a string.
pub fn read_str<T: Scalar>(text: &str, opts: &ReadOptions) -> Result<Csr<T>, SparseError> {
    read_text(text.as_bytes(), opts, &SizeLimits::default())
}

/// Reads only the banner and size line of Matrix Market text (not gzip), with
/// the same parser and checks as the full reader, and returns what they declare.
pub fn read_header(
    text: &[u8],
    opts: &ReadOptions,
    limits: &SizeLimits,
) -> Result<Declared, SparseError> {
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    let h = parse_header(text, opts, limits).map_err(|f| f.into_error(text))?;
    Ok(Declared {
        nrows: h.nrows,
        ncols: h.ncols,
        entries: h.entries,
        mirrored: h.mirrored(),
    })
}

fn text_too_large(len: usize, max: usize) -> SparseError {
    SparseError::parse(
        0,
        ParseErrorKind::TooLarge,
        format!("the text is over the limit of {max} bytes (at least {len})"),
    )
}

/// Decompresses a whole gzip stream (several concatenated members are allowed).
///
/// Errors are [`ParseErrorKind::Gzip`] with line 0: a corrupt or truncated
/// stream has no meaningful line. Gzip inside gzip is refused
/// ([`ParseErrorKind::NestedGzip`]).
pub fn gunzip(bytes: &[u8]) -> Result<Vec<u8>, SparseError> {
    gunzip_limited(bytes, usize::MAX)
}

/// Decompresses one gzip layer, streaming, never holding more than `max`
/// output bytes: past it the result is a [`ParseErrorKind::TooLarge`] error.
/// Output that is itself gzip is refused as soon as its first two bytes are
/// seen ([`ParseErrorKind::NestedGzip`]), without decoding the inner layer.
pub fn gunzip_limited(bytes: &[u8], max: usize) -> Result<Vec<u8>, SparseError> {
    let corrupt = |e: std::io::Error| {
        SparseError::parse(
            0,
            ParseErrorKind::Gzip,
            format!("gzip data is corrupt or truncated: {e}"),
        )
    };
    // The trailer holds the uncompressed size modulo 2^32; it is only a hint, capped
    // at 16 times the input (Matrix Market text compresses 3-6x; beyond the cap the
    // buffer grows as data arrives) so a forged trailer cannot make us over-allocate.
    let hint = match bytes.len() {
        n if n >= 18 => {
            let t = &bytes[n - 4..];
            u32::from_le_bytes([t[0], t[1], t[2], t[3]]) as usize
        }
        _ => 0,
    };
    let cap = hint.min(bytes.len().saturating_mul(16)).min(max) + 1;
    let mut out = Vec::with_capacity(cap);
    let mut dec = flate2::read::MultiGzDecoder::new(bytes).take((max as u64).saturating_add(1));
    // The first two bytes decide whether this is gzip inside gzip.
    while out.len() < 2 {
        let mut b = [0u8; 1];
        match dec.read(&mut b).map_err(corrupt)? {
            0 => break,
            _ => out.push(b[0]),
        }
    }
    if out.starts_with(&GZIP_MAGIC) {
        return Err(SparseError::parse(
            0,
            ParseErrorKind::NestedGzip,
            "the gzip data holds gzip again: only one layer of compression is accepted",
        ));
    }
    dec.read_to_end(&mut out).map_err(corrupt)?;
    if out.len() > max {
        return Err(SparseError::parse(
            0,
            ParseErrorKind::TooLarge,
            format!("the decompressed text is over the limit of {max} bytes"),
        ));
    }
    Ok(out)
}

/// Writes `a` as `coordinate real general` with 1-based indices, one entry per
/// line in row order. Values are printed in the shortest form that reads back
/// to the same bits, so [`read_bytes`] of the output gives `a` again.
pub fn write<T: Scalar, W: Write>(a: &Csr<T>, w: W) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::with_capacity(1 << 16, w);
    writeln!(w, "%%MatrixMarket matrix coordinate real general")?;
    writeln!(w, "{} {} {}", a.nrows(), a.ncols(), a.nnz())?;
    for r in 0..a.nrows() {
        let (cols, vals) = a.row(r);
        for (c, v) in cols.iter().zip(vals) {
            // `{:?}` is Rust's shortest round-trip form, with an exponent for very
            // large or small magnitudes (`{}` would print hundreds of digits).
            writeln!(w, "{} {} {:?}", r + 1, c + 1, v)?;
        }
    }
    w.flush()
}

/// Writes `a` to a file with [`write()`], gzip-compressed when the name ends in `.gz`.
pub fn write_path<T: Scalar>(a: &Csr<T>, path: &Path) -> std::io::Result<()> {
    let file = std::fs::File::create(path)?;
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
    {
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        write(a, &mut gz)?;
        gz.finish()?.sync_all()
    } else {
        write(a, file)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Coordinate,
    Array,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Real,
    Integer,
    Pattern,
    Complex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Symmetry {
    General,
    Symmetric,
    Skew,
    Hermitian,
}

/// What the banner and size line say.
#[derive(Debug, Clone, Copy)]
struct Header {
    format: Format,
    field: Field,
    symmetry: Symmetry,
    nrows: usize,
    ncols: usize,
    /// Entries the data section must hold (for `array`, derived from the size).
    entries: usize,
    /// Byte offset where the data section starts.
    data_start: usize,
    /// 1-based line of the size line.
    size_line: usize,
    /// Most entries allowed after symmetric expansion.
    max_nnz: usize,
}

impl Header {
    fn mirrored(&self) -> bool {
        self.symmetry != Symmetry::General
    }
}

/// A problem found at byte offset `at` (the start of its line); turned into a
/// line number only when reported, so the fast path never counts lines.
struct Fail {
    at: usize,
    /// A line given directly, for problems not located at a byte (truncation).
    line: Option<usize>,
    kind: ParseErrorKind,
    message: String,
}

fn fail(at: usize, kind: ParseErrorKind, message: impl Into<String>) -> Fail {
    Fail {
        at,
        line: None,
        kind,
        message: message.into(),
    }
}

/// 1-based line number of byte offset `at`.
fn line_of(text: &[u8], at: usize) -> usize {
    1 + text[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// Number of lines in the text (a last line without `\n` counts).
fn line_count(text: &[u8]) -> usize {
    let n = text.iter().filter(|&&b| b == b'\n').count();
    n + usize::from(!text.is_empty() && !text.ends_with(b"\n"))
}

impl Fail {
    fn into_error(self, text: &[u8]) -> SparseError {
        let line = self.line.unwrap_or_else(|| line_of(text, self.at));
        SparseError::parse(line, self.kind, self.message)
    }
}

/// The parsed entries of one chunk of the data section, 0-based.
struct Entries<T> {
    rows: Vec<u32>,
    cols: Vec<u32>,
    /// Empty for `pattern` matrices (every value is 1).
    vals: Vec<T>,
    /// Entries off the diagonal (each gains a mirror image when expanded).
    offdiag: usize,
}

impl<T> Entries<T> {
    fn with_capacity(n: usize, pattern: bool) -> Self {
        Entries {
            rows: Vec::with_capacity(n),
            cols: Vec::with_capacity(n),
            vals: Vec::with_capacity(if pattern { 0 } else { n }),
            offdiag: 0,
        }
    }
    fn len(&self) -> usize {
        self.rows.len()
    }
}

fn read_text<T: Scalar>(
    text: &[u8],
    opts: &ReadOptions,
    limits: &SizeLimits,
) -> Result<Csr<T>, SparseError> {
    // A UTF-8 byte order mark, as some editors write, is not part of the banner.
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    if let Err(e) = std::str::from_utf8(text) {
        let at = e.valid_up_to();
        let line_start = text[..at]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1);
        return Err(SparseError::parse(
            line_of(text, line_start),
            ParseErrorKind::NotUtf8,
            format!(
                "byte {at} (0x{:02x}) is not valid UTF-8: not a text file",
                text[at]
            ),
        ));
    }
    let h = parse_header(text, opts, limits).map_err(|f| f.into_error(text))?;
    let entries = match h.format {
        Format::Coordinate => parse_coordinate::<T>(text, &h),
        Format::Array => parse_array::<T>(text, &h),
    }
    .map_err(|f| f.into_error(text))?;
    build(&h, &entries)
}

/// Splits a line into whitespace-separated tokens.
fn tokens(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|b| b.is_ascii_whitespace())
        .filter(|t| !t.is_empty())
}

/// The line starting at `pos`, without its line end, and where the next one starts.
fn line_at(text: &[u8], pos: usize) -> (&[u8], usize) {
    match text[pos..].iter().position(|&b| b == b'\n') {
        Some(n) => (&text[pos..pos + n], pos + n + 1),
        None => (&text[pos..], text.len()),
    }
}

fn is_blank_or_comment(line: &[u8]) -> bool {
    match line.iter().find(|b| !b.is_ascii_whitespace()) {
        None => true,
        Some(&b) => b == b'%',
    }
}

fn parse_header(text: &[u8], opts: &ReadOptions, limits: &SizeLimits) -> Result<Header, Fail> {
    if text.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(fail(0, ParseErrorKind::Empty, "the file is empty"));
    }
    let (banner, pos) = line_at(text, 0);
    let (format, field, symmetry) = parse_banner(banner)?;
    check_combination(format, field, symmetry, opts)?;
    let (size_at, line_no) = find_size_line(text, pos)?;
    let (line, data_start) = line_at(text, size_at);
    let nums = parse_size_line(line, format, size_at)?;
    let (m, n, entries) = check_size(nums, format, symmetry, size_at)?;
    let h = Header {
        format,
        field,
        symmetry,
        nrows: m as usize,
        ncols: n as usize,
        entries: entries as usize,
        data_start,
        size_line: line_no,
        max_nnz: limits.max_nnz,
    };
    check_declared(text, &h, limits).map_err(|(kind, message)| fail(size_at, kind, message))?;
    Ok(h)
}

/// The banner's format words (matched in any case).
const FORMATS: &[(&[u8], Format)] = &[
    (b"coordinate", Format::Coordinate),
    (b"array", Format::Array),
];

/// The banner's field words (matched in any case).
const FIELDS: &[(&[u8], Field)] = &[
    (b"real", Field::Real),
    (b"double", Field::Real),
    (b"integer", Field::Integer),
    (b"pattern", Field::Pattern),
    (b"complex", Field::Complex),
];

/// The banner's symmetry words (matched in any case).
const SYMMETRIES: &[(&[u8], Symmetry)] = &[
    (b"general", Symmetry::General),
    (b"symmetric", Symmetry::Symmetric),
    (b"skew-symmetric", Symmetry::Skew),
    (b"hermitian", Symmetry::Hermitian),
];

/// One word of the banner, looked up (in any case) in `table`; an unknown word
/// is `kind`, with the valid words listed as `choices`.
fn banner_word<T: Copy>(
    tok: &[u8],
    table: &[(&[u8], T)],
    kind: ParseErrorKind,
    what: &str,
    choices: &str,
) -> Result<T, Fail> {
    let word = tok.to_ascii_lowercase();
    match table.iter().find(|(name, _)| *name == word.as_slice()) {
        Some(&(_, value)) => Ok(value),
        None => Err(fail(
            0,
            kind,
            format!(
                "{what} `{}` is not supported ({choices})",
                String::from_utf8_lossy(tok)
            ),
        )),
    }
}

/// The banner line: `%%MatrixMarket matrix FORMAT FIELD SYMMETRY`.
fn parse_banner(banner: &[u8]) -> Result<(Format, Field, Symmetry), Fail> {
    use ParseErrorKind::*;
    let toks: Vec<&[u8]> = tokens(banner).collect();
    let shown = String::from_utf8_lossy(banner).trim_end().to_string();
    if toks.is_empty() || !toks[0].eq_ignore_ascii_case(b"%%MatrixMarket") {
        return Err(fail(
            0,
            BadBanner,
            format!(
                "expected a `%%MatrixMarket matrix FORMAT FIELD SYMMETRY` banner, found `{shown}`"
            ),
        ));
    }
    if toks.len() != 5 {
        return Err(fail(0, BadBanner, format!("the banner must have 5 words (%%MatrixMarket matrix FORMAT FIELD SYMMETRY), found {} in `{shown}`", toks.len())));
    }
    if !toks[1].eq_ignore_ascii_case(b"matrix") {
        return Err(fail(
            0,
            BadBanner,
            format!(
                "object `{}` is not supported, only `matrix`",
                String::from_utf8_lossy(toks[1])
            ),
        ));
    }
    let format = banner_word(
        toks[2],
        FORMATS,
        UnsupportedFormat,
        "format",
        "coordinate or array",
    )?;
    let field = banner_word(
        toks[3],
        FIELDS,
        UnsupportedField,
        "field",
        "real, double, integer, pattern or complex",
    )?;
    let symmetry = banner_word(
        toks[4],
        SYMMETRIES,
        UnsupportedSymmetry,
        "symmetry",
        "general, symmetric, skew-symmetric or hermitian",
    )?;
    Ok((format, field, symmetry))
}

/// The combinations of banner words that the format rules out or that this
/// reader was not asked to read.
fn check_combination(
    format: Format,
    field: Field,
    symmetry: Symmetry,
    opts: &ReadOptions,
) -> Result<(), Fail> {
    let bad = |message: &'static str| Err(fail(0, ParseErrorKind::InvalidCombination, message));
    if format == Format::Array && field == Field::Pattern {
        return bad("a pattern matrix cannot use the array format");
    }
    if symmetry == Symmetry::Hermitian && field != Field::Complex {
        return bad("hermitian symmetry requires the complex field");
    }
    if symmetry == Symmetry::Skew && field == Field::Pattern {
        return bad("a pattern matrix cannot be skew-symmetric");
    }
    if field == Field::Complex && !opts.complex_real_part {
        return Err(fail(0, ParseErrorKind::ComplexNotAllowed, "complex matrices are only read when the real part is asked for (ReadOptions::complex_real_part, `--real-part`)"));
    }
    Ok(())
}

/// The size line: the first line after the banner (at `pos`) that is neither
/// blank nor a comment. Gives its byte offset and its 1-based line number.
fn find_size_line(text: &[u8], mut pos: usize) -> Result<(usize, usize), Fail> {
    let mut line_no = 1;
    loop {
        if pos >= text.len() {
            return Err(fail(
                text.len(),
                ParseErrorKind::BadSizeLine,
                "the file ends before the size line",
            ));
        }
        line_no += 1;
        let (line, next) = line_at(text, pos);
        if !is_blank_or_comment(line) {
            return Ok((pos, line_no));
        }
        pos = next;
    }
}

/// The numbers of the size line (`ROWS COLS ENTRIES`, or `ROWS COLS` for the
/// array format, then 0), saturating at `u64::MAX`.
fn parse_size_line(line: &[u8], format: Format, size_at: usize) -> Result<[u64; 3], Fail> {
    let (want, what) = match format {
        Format::Coordinate => (3, "`ROWS COLS ENTRIES`"),
        Format::Array => (2, "`ROWS COLS`"),
    };
    let shown = String::from_utf8_lossy(line).trim().to_string();
    let toks: Vec<&[u8]> = tokens(line).collect();
    if toks.len() != want {
        return Err(fail(
            size_at,
            ParseErrorKind::BadSizeLine,
            format!("the size line must be {what}, found `{shown}`"),
        ));
    }
    let mut nums = [0u64; 3];
    for (k, t) in toks.iter().enumerate() {
        if !t.iter().all(u8::is_ascii_digit) {
            return Err(fail(
                size_at,
                ParseErrorKind::BadSizeLine,
                format!("the size line must be {what} (non-negative integers), found `{shown}`"),
            ));
        }
        // Saturating: any value this long is rejected as too large later.
        nums[k] = t.iter().fold(0u64, |v, &d| {
            v.saturating_mul(10).saturating_add(u64::from(d - b'0'))
        });
    }
    Ok(nums)
}

/// Checks the declared size against the 32-bit device indices and the
/// symmetry; gives rows, columns and the entries the data section must hold.
fn check_size(
    nums: [u64; 3],
    format: Format,
    symmetry: Symmetry,
    size_at: usize,
) -> Result<(u64, u64, u64), Fail> {
    let too_large = |what: &str, v: u64| {
        let v = if v == u64::MAX {
            "a number beyond 64 bits".to_string()
        } else {
            v.to_string()
        };
        Err(fail(
            size_at,
            ParseErrorKind::TooLarge,
            format!("{what} = {v} does not fit 32-bit device indices (at most {MAX_DIM})"),
        ))
    };
    let (m, n) = (nums[0], nums[1]);
    if m > MAX_DIM as u64 {
        return too_large("rows", m);
    }
    if n > MAX_DIM as u64 {
        return too_large("cols", n);
    }
    if symmetry != Symmetry::General && m != n {
        return Err(fail(
            size_at,
            ParseErrorKind::NotSquare,
            format!(
                "a {} matrix must be square, but the size is {m} x {n}",
                sym_name(symmetry)
            ),
        ));
    }
    let entries = match format {
        Format::Coordinate => nums[2],
        Format::Array => match symmetry {
            Symmetry::General => m * n,
            Symmetry::Symmetric | Symmetry::Hermitian => n * (n + 1) / 2,
            Symmetry::Skew => n * n.saturating_sub(1) / 2,
        },
    };
    if entries > MAX_DIM as u64 {
        return too_large("nnz", entries);
    }
    if format == Format::Array {
        let expanded = match symmetry {
            Symmetry::Skew => m * n - n,
            _ => m * n,
        };
        if expanded > MAX_DIM as u64 {
            return too_large("nnz after symmetric expansion", expanded);
        }
    }
    Ok((m, n, entries))
}

/// Shortest possible data line of this header, with its line end.
fn min_entry_line(h: &Header) -> usize {
    match (h.format, h.field) {
        (Format::Coordinate, Field::Pattern) => 4,
        (Format::Coordinate, Field::Complex) => 8,
        (Format::Coordinate, _) => 6,
        (Format::Array, Field::Complex) => 4,
        (Format::Array, _) => 2,
    }
}

/// Checks declared sizes against the limits and against what the text can
/// hold (see [`SizeLimits`]), before anything is allocated for them.
fn check_declared(
    text: &[u8],
    h: &Header,
    limits: &SizeLimits,
) -> Result<(), (ParseErrorKind, String)> {
    use ParseErrorKind::{ExceedsData, TooLarge};
    let over = |what: &str, v: usize, max: usize| {
        (TooLarge, format!("{what} = {v} is over the limit of {max}"))
    };
    if h.nrows > limits.max_rows {
        return Err(over("rows", h.nrows, limits.max_rows));
    }
    if h.ncols > limits.max_cols {
        return Err(over("cols", h.ncols, limits.max_cols));
    }
    let stored = match h.format {
        Format::Array if h.symmetry == Symmetry::Skew => h.nrows * h.ncols - h.ncols.min(h.nrows),
        Format::Array => h.nrows * h.ncols,
        Format::Coordinate => h.entries,
    };
    if stored > limits.max_nnz {
        return Err(over("nnz", stored, limits.max_nnz));
    }
    let data = text.len() - h.data_start;
    let line = min_entry_line(h);
    let room = (data + 1) / line;
    if h.entries > room.saturating_add(ENTRY_SLACK) {
        return Err((
            ExceedsData,
            format!(
                "{} entries are declared but the {data} bytes after the size line hold at most {room} (an entry line takes at least {line} bytes)",
                h.entries
            ),
        ));
    }
    let dims = h.nrows as u64 + h.ncols as u64;
    let allowed = DIM_FLOOR.max(DIMS_PER_BYTE.saturating_mul(text.len() as u64));
    if dims > allowed {
        return Err((
            ExceedsData,
            format!(
                "rows + cols = {dims} is more than a {}-byte text may declare (at most {allowed}: {DIM_FLOOR}, or {DIMS_PER_BYTE} per byte of text)",
                text.len()
            ),
        ));
    }
    Ok(())
}

fn sym_name(s: Symmetry) -> &'static str {
    match s {
        Symmetry::General => "general",
        Symmetry::Symmetric => "symmetric",
        Symmetry::Skew => "skew-symmetric",
        Symmetry::Hermitian => "hermitian",
    }
}

/// Whether `b` separates fields.
#[inline(always)]
fn is_sep(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Whether `b` may end a number: a separator, a line end or the end of text.
#[inline(always)]
fn ends_token(text: &[u8], p: usize, end: usize) -> bool {
    p >= end || matches!(text[p], b' ' | b'\t' | b'\r' | b'\n')
}

/// Skips separators and a carriage return before the end of the line.
#[inline(always)]
fn skip_sep(text: &[u8], mut p: usize, end: usize) -> usize {
    while p < end && (is_sep(text[p]) || text[p] == b'\r') {
        p += 1;
    }
    p
}

/// Fields on the line starting at `line_start`, for error messages.
fn fields_on_line(text: &[u8], line_start: usize) -> usize {
    tokens(line_at(text, line_start).0).count()
}

/// Field names of a data line of this header, for error messages.
fn field_names(h: &Header) -> &'static str {
    match (h.format, h.field) {
        (Format::Coordinate, Field::Pattern) => "2 fields (ROW COL)",
        (Format::Coordinate, Field::Complex) => "4 fields (ROW COL RE IM)",
        (Format::Coordinate, _) => "3 fields (ROW COL VALUE)",
        (Format::Array, Field::Complex) => "2 fields (RE IM)",
        (Format::Array, _) => "1 field (VALUE)",
    }
}

fn wrong_fields(text: &[u8], line_start: usize, h: &Header) -> Fail {
    fail(
        line_start,
        ParseErrorKind::WrongFieldCount,
        format!(
            "expected {}, found {}",
            field_names(h),
            fields_on_line(text, line_start)
        ),
    )
}

/// Moves from the end of one field to the start of the next one on the same
/// line; an early line end means too few fields.
#[inline(always)]
fn next_field(
    text: &[u8],
    p: usize,
    end: usize,
    line_start: usize,
    h: &Header,
) -> Result<usize, Fail> {
    let q = skip_sep(text, p, end);
    if q >= end || text[q] == b'\n' {
        return Err(wrong_fields(text, line_start, h));
    }
    Ok(q)
}

/// After the last field: only separators may follow before the line end.
/// Returns the start of the next line.
#[inline(always)]
fn end_of_line(
    text: &[u8],
    p: usize,
    end: usize,
    line_start: usize,
    h: &Header,
) -> Result<usize, Fail> {
    let q = skip_sep(text, p, end);
    if q >= end {
        return Ok(end);
    }
    if text[q] == b'\n' {
        return Ok(q + 1);
    }
    Err(wrong_fields(text, line_start, h))
}

/// The token starting at `p`, for error messages.
fn token_at(text: &[u8], p: usize) -> String {
    let e = text[p..]
        .iter()
        .position(|b| b.is_ascii_whitespace())
        .map_or(text.len(), |n| p + n);
    String::from_utf8_lossy(&text[p..e]).into_owned()
}

/// The value and count of the decimal digits starting at `s`, read eight bytes
/// at a time (SWAR), which avoids a mispredicted branch per digit; `None` when
/// fewer than eight bytes remain. A count of 8 means the number may go on.
#[inline(always)]
fn swar_digits(text: &[u8], s: usize, end: usize) -> Option<(u64, usize)> {
    let bytes: [u8; 8] = text
        .get(s..s + 8)
        .filter(|_| s + 8 <= end)?
        .try_into()
        .ok()?;
    let chunk = u64::from_le_bytes(bytes);
    let sub = chunk.wrapping_sub(0x3030_3030_3030_3030);
    // A byte is not a digit when `b - '0'` borrows (high bit set) or exceeds 9
    // (adding 0x76 sets the high bit). Borrows only travel towards later bytes,
    // so every byte before the first non-digit is judged correctly.
    let nondigit = (sub | sub.wrapping_add(0x7676_7676_7676_7676)) & 0x8080_8080_8080_8080;
    let n = (nondigit.trailing_zeros() / 8) as usize;
    if n == 0 {
        return Some((0, 0));
    }
    // Move the n digits to the top bytes (zeros in front are leading zeros),
    // then combine pairs, quads and octets.
    let mut d = if n == 8 { sub } else { sub << (8 * (8 - n)) };
    d = (d & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(10 * 256 + 1) >> 8;
    d = (d & 0x00FF_00FF_00FF_00FF).wrapping_mul(100 * 65536 + 1) >> 16;
    d = (d & 0x0000_FFFF_0000_FFFF).wrapping_mul(10000 * (1 << 32) + 1) >> 32;
    Some((d, n))
}

/// Parses a 1-based index bounded by `dim`, returning it 0-based.
#[inline(always)]
fn parse_index(
    text: &[u8],
    p: &mut usize,
    end: usize,
    dim: usize,
    what: &str,
    line_start: usize,
) -> Result<u32, Fail> {
    let s = *p;
    let (mut v, mut q) = match swar_digits(text, s, end) {
        Some((v, n)) if n < 8 => (v, s + n),
        _ => (0, s),
    };
    if q == s {
        // Eight digits or more, or too close to the end of the text for SWAR.
        while q < end {
            let d = text[q].wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            v = v.wrapping_mul(10).wrapping_add(u64::from(d));
            q += 1;
        }
    }
    // More than 18 digits may have wrapped: such an index is out of range anyway.
    if q - s > 18 {
        v = u64::MAX;
    }
    if q == s || !ends_token(text, q, end) {
        let tok = token_at(text, s);
        let negative =
            tok.len() > 1 && tok.starts_with('-') && tok[1..].bytes().all(|b| b.is_ascii_digit());
        return Err(if negative {
            fail(
                line_start,
                ParseErrorKind::IndexOutOfRange,
                format!("{what} index {tok} is out of range 1..={dim}"),
            )
        } else {
            fail(
                line_start,
                ParseErrorKind::NonNumeric,
                format!("{what} index `{tok}` is not a positive integer"),
            )
        });
    }
    if v == 0 || v > dim as u64 {
        return Err(fail(
            line_start,
            ParseErrorKind::IndexOutOfRange,
            format!(
                "{what} index {} is out of range 1..={dim}",
                token_at(text, s)
            ),
        ));
    }
    *p = q;
    Ok((v - 1) as u32)
}

/// Parses one value field of the given kind (`real` or `integer`).
#[inline(always)]
fn parse_value(
    text: &[u8],
    p: &mut usize,
    end: usize,
    integer: bool,
    line_start: usize,
) -> Result<f64, Fail> {
    let s = *p;
    if integer {
        let mut q = s;
        let neg = q < end && text[q] == b'-';
        if q < end && (text[q] == b'-' || text[q] == b'+') {
            q += 1;
        }
        let ds = q;
        let mut v: u64 = 0;
        while q < end && text[q].is_ascii_digit() && q - ds < 18 {
            v = v * 10 + u64::from(text[q] - b'0');
            q += 1;
        }
        if q > ds && ends_token(text, q, end) {
            *p = q;
            let v = v as f64;
            return Ok(if neg { -v } else { v });
        }
        if q > ds && q < end && text[q].is_ascii_digit() {
            // More than 18 digits: let the float parser round it.
            if let Ok((v, n)) = fast_float2::parse_partial::<f64, _>(&text[s..end]) {
                if ends_token(text, s + n, end)
                    && text[s..s + n]
                        .iter()
                        .all(|b| b.is_ascii_digit() || *b == b'-' || *b == b'+')
                {
                    *p = s + n;
                    return Ok(v);
                }
            }
        }
        return Err(fail(
            line_start,
            ParseErrorKind::NonNumeric,
            format!("value `{}` is not an integer", token_at(text, s)),
        ));
    }
    match fast_float2::parse_partial::<f64, _>(&text[s..end]) {
        Ok((v, n)) if ends_token(text, s + n, end) => {
            *p = s + n;
            Ok(v)
        }
        _ => Err(fail(
            line_start,
            ParseErrorKind::NonNumeric,
            format!("value `{}` is not a number", token_at(text, s)),
        )),
    }
}

/// Skips blank and comment lines starting at `p`; returns the start of the next
/// data line's first field, or `None` at the end of the range.
#[inline(always)]
fn next_data_line(text: &[u8], mut p: usize, end: usize) -> (usize, Option<usize>) {
    loop {
        let line_start = p;
        while p < end && is_sep(text[p]) {
            p += 1;
        }
        if p >= end {
            return (line_start, None);
        }
        match text[p] {
            b'\n' => p += 1,
            b'\r' => {
                let q = skip_sep(text, p, end);
                if q >= end {
                    return (line_start, None);
                }
                if text[q] == b'\n' {
                    p = q + 1;
                } else {
                    return (line_start, Some(q));
                }
            }
            b'%' => match text[p..end].iter().position(|&b| b == b'\n') {
                Some(n) => p += n + 1,
                None => return (line_start, None),
            },
            _ => return (line_start, Some(p)),
        }
    }
}

/// Parses the coordinate entries in `text[start..end]` (whole lines), at most `limit` of them.
fn coordinate_chunk<T: Scalar>(
    text: &[u8],
    start: usize,
    end: usize,
    h: &Header,
    limit: usize,
    capacity: usize,
) -> Result<Entries<T>, Fail> {
    let pattern = h.field == Field::Pattern;
    let integer = h.field == Field::Integer;
    let complex = h.field == Field::Complex;
    let skew = h.symmetry == Symmetry::Skew;
    let mut out = Entries::with_capacity(capacity, pattern);
    let mut p = start;
    loop {
        let (line_start, first) = next_data_line(text, p, end);
        let Some(mut q) = first else { break };
        if out.len() == limit {
            return Err(fail(
                line_start,
                ParseErrorKind::TooManyEntries,
                format!(
                    "entry {} is one more than the {} declared on line {}",
                    limit + 1,
                    h.entries,
                    h.size_line
                ),
            ));
        }
        let r = parse_index(text, &mut q, end, h.nrows, "row", line_start)?;
        q = next_field(text, q, end, line_start, h)?;
        let c = parse_index(text, &mut q, end, h.ncols, "column", line_start)?;
        if !pattern {
            q = next_field(text, q, end, line_start, h)?;
            let v = parse_value(text, &mut q, end, integer, line_start)?;
            if complex {
                q = next_field(text, q, end, line_start, h)?;
                parse_value(text, &mut q, end, false, line_start)?;
            }
            out.vals.push(T::from_f64(v));
        }
        p = end_of_line(text, q, end, line_start, h)?;
        if r != c {
            out.offdiag += 1;
        } else if skew {
            return Err(fail(
                line_start,
                ParseErrorKind::TriangleViolation,
                format!(
                    "a skew-symmetric matrix has no diagonal entries, found ({}, {})",
                    r + 1,
                    c + 1
                ),
            ));
        }
        out.rows.push(r);
        out.cols.push(c);
    }
    Ok(out)
}

/// Splits `text[start..]` into about `parts` ranges ending at line boundaries.
fn split_lines(text: &[u8], start: usize, parts: usize) -> Vec<(usize, usize)> {
    let len = text.len() - start;
    let mut out = Vec::with_capacity(parts);
    let mut s = start;
    for k in 1..parts {
        let target = (start + len * k / parts).max(s);
        let e = match text[target..].iter().position(|&b| b == b'\n') {
            Some(n) => target + n + 1,
            None => text.len(),
        };
        if e > s {
            out.push((s, e));
            s = e;
        }
    }
    if s < text.len() || out.is_empty() {
        out.push((s, text.len()));
    }
    out
}

fn parse_coordinate<T: Scalar>(text: &[u8], h: &Header) -> Result<Vec<Entries<T>>, Fail> {
    let data = text.len() - h.data_start;
    // Never reserve for entries the bytes cannot hold: a data line has at least
    // 4 bytes ("1 1\n"), so the header's count is capped by the text's length.
    let cap_for = |bytes: usize| -> usize {
        let share = (h.entries as f64 * bytes as f64 / data.max(1) as f64 * 1.02) as usize + 16;
        share.min(bytes / 4 + 1).min(h.entries)
    };
    let parts = if data < PARALLEL_MIN_BYTES {
        1
    } else {
        (data / CHUNK_BYTES).clamp(1, rayon::current_num_threads() * 8)
    };
    if parts > 1 {
        let ranges = split_lines(text, h.data_start, parts);
        let chunks: Result<Vec<Entries<T>>, Fail> = ranges
            .par_iter()
            .map(|&(s, e)| coordinate_chunk(text, s, e, h, h.entries, cap_for(e - s)))
            .collect();
        if let Ok(chunks) = chunks {
            let total: usize = chunks.iter().map(Entries::len).sum();
            if total == h.entries {
                return Ok(chunks);
            }
        }
        // Something is wrong: parse again in order, so that the error reported is
        // the first one a sequential reader would meet (extra entries included).
    }
    let one = coordinate_chunk(text, h.data_start, text.len(), h, h.entries, cap_for(data))?;
    if one.len() < h.entries {
        return Err(truncated(text, h, one.len()));
    }
    Ok(vec![one])
}

fn truncated(text: &[u8], h: &Header, found: usize) -> Fail {
    // Point at the line after the last one: where the missing entry should be.
    let missing = line_count(text) + 1;
    Fail {
        at: usize::MAX,
        line: Some(missing),
        kind: ParseErrorKind::Truncated,
        message: format!(
            "the file ends after {found} of the {} entries declared on line {} (line {missing} is missing)",
            h.entries, h.size_line
        ),
    }
}

fn parse_array<T: Scalar>(text: &[u8], h: &Header) -> Result<Vec<Entries<T>>, Fail> {
    let data = text.len() - h.data_start;
    let integer = h.field == Field::Integer;
    let complex = h.field == Field::Complex;
    // A value line has at least 2 bytes ("1\n").
    let mut out = Entries::with_capacity(h.entries.min(data / 2 + 1), false);
    let (m, n) = (h.nrows, h.ncols);
    // Column-major position of the next value; symmetric variants walk the lower
    // triangle (skew-symmetric without the diagonal).
    let first_row = |j: usize| match h.symmetry {
        Symmetry::General => 0,
        Symmetry::Symmetric | Symmetry::Hermitian => j,
        Symmetry::Skew => j + 1,
    };
    let (mut i, mut j) = (first_row(0), 0usize);
    while j < n && i >= m {
        j += 1;
        i = first_row(j);
    }
    let mut p = h.data_start;
    loop {
        let (line_start, first) = next_data_line(text, p, text.len());
        let Some(mut q) = first else { break };
        if out.len() == h.entries {
            return Err(fail(
                line_start,
                ParseErrorKind::TooManyEntries,
                format!(
                    "a {m} x {n} {} array holds {} values but there are more",
                    sym_name(h.symmetry),
                    h.entries
                ),
            ));
        }
        let v = parse_value(text, &mut q, text.len(), integer, line_start)?;
        if complex {
            q = next_field(text, q, text.len(), line_start, h)?;
            parse_value(text, &mut q, text.len(), false, line_start)?;
        }
        p = end_of_line(text, q, text.len(), line_start, h)?;
        out.rows.push(i as u32);
        out.cols.push(j as u32);
        out.vals.push(T::from_f64(v));
        if i != j {
            out.offdiag += 1;
        }
        i += 1;
        while j < n && i >= m {
            j += 1;
            i = first_row(j);
        }
    }
    if out.len() < h.entries {
        return Err(truncated(text, h, out.len()));
    }
    Ok(vec![out])
}

/// Builds the CSR arrays from the parsed entries with one counting sort,
/// mirroring off-diagonal entries of symmetric matrices.
fn build<T: Scalar>(h: &Header, chunks: &[Entries<T>]) -> Result<Csr<T>, SparseError> {
    let mirrored = h.mirrored();
    let total: usize = chunks.iter().map(Entries::len).sum();
    let offdiag: usize = chunks.iter().map(|c| c.offdiag).sum();
    let expanded = if mirrored { total + offdiag } else { total };
    if expanded > MAX_DIM {
        return Err(SparseError::parse(
            h.size_line,
            ParseErrorKind::TooLarge,
            format!("nnz after symmetric expansion = {expanded} does not fit 32-bit device indices (at most {MAX_DIM})"),
        ));
    }
    if expanded > h.max_nnz {
        return Err(SparseError::parse(
            h.size_line,
            ParseErrorKind::TooLarge,
            format!(
                "nnz after symmetric expansion = {expanded} is over the limit of {}",
                h.max_nnz
            ),
        ));
    }
    let nrows = h.nrows;
    let negate = h.symmetry == Symmetry::Skew;
    // A parallel counting sort: consecutive chunks form groups, each group counts
    // its entries per row, and the counts give every group its own write position
    // in every row, so the groups scatter at the same time without sharing a slot
    // and each row keeps the file's order. A group's counters cost `nrows` words,
    // so there are only as many groups as the entries pay for.
    let threads = rayon::current_num_threads();
    let ngroups = chunks.len().min(threads).min(total / nrows.max(1)).max(1);
    let groups: Vec<&[Entries<T>]> = (0..ngroups)
        .map(|g| &chunks[g * chunks.len() / ngroups..(g + 1) * chunks.len() / ngroups])
        .collect();
    let mut next: Vec<Vec<u32>> = groups
        .par_iter()
        .map(|group| {
            let mut count = vec![0u32; nrows];
            for ch in group.iter() {
                for (&r, &c) in ch.rows.iter().zip(&ch.cols) {
                    count[r as usize] += 1;
                    if mirrored && r != c {
                        count[c as usize] += 1;
                    }
                }
            }
            count
        })
        .collect();
    let mut row_ptr = vec![0u32; nrows + 1];
    let mut at = 0u32;
    for r in 0..nrows {
        row_ptr[r] = at;
        for count in next.iter_mut() {
            let n = count[r];
            count[r] = at;
            at += n;
        }
    }
    row_ptr[nrows] = at;
    let mut col_idx = vec![0u32; expanded];
    let mut values = vec![T::zero(); expanded];
    let out = Scatter {
        cols: col_idx.as_mut_ptr(),
        vals: values.as_mut_ptr(),
        len: expanded,
    };
    groups
        .par_iter()
        .zip(next.par_iter_mut())
        .for_each(|(group, next)| {
            for ch in group.iter() {
                out.entries(ch, next, mirrored, negate);
            }
        });
    // Rows come out sorted when the file is sorted by column (as SuiteSparse files
    // are); otherwise `try_new` sorts them and sums duplicates.
    Csr::try_new(nrows, h.ncols, row_ptr, col_idx, values)
}

/// Raw output arrays shared by the scatter tasks of [`build`].
struct Scatter<T> {
    cols: *mut u32,
    vals: *mut T,
    len: usize,
}

// SAFETY: the tasks write through the pointers only at the positions their own
// counters hand out, which are disjoint between tasks by construction (see
// `build`); every write is bounds-checked against `len`.
unsafe impl<T: Send> Sync for Scatter<T> {}

impl<T: Scalar> Scatter<T> {
    #[inline(always)]
    fn put(&self, dst: usize, c: u32, v: T) {
        assert!(dst < self.len, "scatter position out of bounds");
        // SAFETY: in bounds (checked above) and no other task owns `dst`.
        unsafe {
            self.cols.add(dst).write(c);
            self.vals.add(dst).write(v);
        }
    }

    /// Scatters one chunk's entries (and their mirror images) to the rows' next slots.
    fn entries(&self, ch: &Entries<T>, next: &mut [u32], mirrored: bool, negate: bool) {
        let one = T::from_f64(1.0);
        let pattern = ch.vals.is_empty();
        for k in 0..ch.len() {
            let (r, c) = (ch.rows[k], ch.cols[k]);
            let v = if pattern { one } else { ch.vals[k] };
            let slot = &mut next[r as usize];
            self.put(*slot as usize, c, v);
            *slot += 1;
            if mirrored && r != c {
                let slot = &mut next[c as usize];
                self.put(*slot as usize, r, if negate { -v } else { v });
                *slot += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SWAR digit reader agrees with a plain loop on every length and follower.
    #[test]
    fn swar_digits_match_plain_parsing() {
        let digits = "9876543210123";
        for len in 0..=digits.len() {
            for follow in [
                " ", "\n", "\r\n", "\t", ".5", "x", "-", "/", ":", "\u{7f}", "0",
            ] {
                let text = format!("{}{follow}        ", &digits[..len]);
                let b = text.as_bytes();
                let plain_n = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let plain_v = text[..plain_n.min(8)].parse::<u64>().unwrap_or(0);
                let (v, n) = swar_digits(b, 0, b.len()).expect("at least 8 bytes");
                assert_eq!(n, plain_n.min(8), "{text:?}");
                assert_eq!(v, plain_v, "{text:?}");
            }
        }
        assert_eq!(swar_digits(b"1234567", 0, 7), None);
        assert_eq!(
            swar_digits(b"12345678 ", 0, 7),
            None,
            "the range end is respected"
        );
    }
}
