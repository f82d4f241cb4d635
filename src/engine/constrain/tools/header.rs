//! Reading a call's header, `{"name": "<name>", "arguments": `, the part of a call the parser
//! and the bare-JSON lead check both read before the arguments.

/// What `read_header` found.
pub(super) enum Header {
    /// A prefix of a header: more text is needed.
    Incomplete,
    /// Not a call header.
    Bad,
    /// The header of a call to `name`; the arguments start at byte `used`.
    Call { name: String, used: usize },
}

/// Read `[ws] open... "name": "<name>", "arguments": ` (or Llama's `"parameters": `) at the
/// start of `s`, where `open` are
/// the brackets before the first key (`["{"]`, or `["[", "{"]` for a list whose later calls
/// come without the `[`), whitespace allowed between the pieces.
pub(super) fn read_header(s: &str, open: &[&str]) -> Header {
    let mut rest = s;
    let pieces: Vec<&str> = open
        .iter()
        .copied()
        .chain(["\"name\"", ":", "\""])
        .collect();
    for (k, p) in pieces.iter().enumerate() {
        rest = rest.trim_start();
        if rest.is_empty() {
            return Header::Incomplete;
        }
        if let Some(r) = rest.strip_prefix(p) {
            rest = r;
        } else if k == 0 && open.len() > 1 && rest.starts_with('{') {
            // A later call of the list: no "[" before it.
            continue;
        } else if p.starts_with(rest) {
            return Header::Incomplete;
        } else {
            return Header::Bad;
        }
    }
    let Some(end) = rest.find('"') else {
        return Header::Incomplete;
    };
    let name = rest[..end].to_owned();
    rest = &rest[end + 1..];
    for alts in [&[","][..], &["\"arguments\"", "\"parameters\""], &[":"]] {
        rest = rest.trim_start();
        if rest.is_empty() {
            return Header::Incomplete;
        }
        if let Some(r) = alts.iter().find_map(|p| rest.strip_prefix(p)) {
            rest = r;
        } else if alts.iter().any(|p| p.starts_with(rest)) {
            return Header::Incomplete;
        } else {
            return Header::Bad;
        }
    }
    let trimmed = rest.trim_start();
    if trimmed.is_empty() {
        return Header::Incomplete;
    }
    Header::Call {
        name,
        used: s.len() - trimmed.len(),
    }
}
