//! Language codes the MCP tools accept: ISO 639-1 or 639-3 codes of the measured languages.
//! May use: nothing of the crate. Never: I/O.

/// ISO 639-1 codes of the measured languages and their ISO 639-3 codes (the UDHR corpus's), plus
/// the macrolanguage codes whose measured member is meant (`zho` -> Mandarin, `ara` -> Standard
/// Arabic, `fas` -> Western Persian, `swa` -> Swahili).
const ALIASES: [(&str, &str); 38] = [
    ("am", "amh"),
    ("ar", "arb"),
    ("bn", "ben"),
    ("bg", "bul"),
    ("cs", "ces"),
    ("zh", "cmn"),
    ("de", "deu"),
    ("el", "ell"),
    ("en", "eng"),
    ("fi", "fin"),
    ("fr", "fra"),
    ("he", "heb"),
    ("hi", "hin"),
    ("hu", "hun"),
    ("hy", "hye"),
    ("id", "ind"),
    ("it", "ita"),
    ("ja", "jpn"),
    ("ka", "kat"),
    ("ko", "kor"),
    ("mr", "mar"),
    ("nl", "nld"),
    ("fa", "pes"),
    ("pl", "pol"),
    ("pt", "por"),
    ("ru", "rus"),
    ("es", "spa"),
    ("sw", "swh"),
    ("ta", "tam"),
    ("th", "tha"),
    ("tr", "tur"),
    ("uk", "ukr"),
    ("ur", "urd"),
    ("vi", "vie"),
    ("zho", "cmn"),
    ("ara", "arb"),
    ("fas", "pes"),
    ("swa", "swh"),
];

/// The ISO 639-3 code of `code`: an ISO 639-1 or 639-3 code of a measured language (any case;
/// a BCP 47 region or script such as `pt-BR`, `zh_Hans` is ignored).
///
/// # Errors
/// Any other code, naming the accepted ones.
pub fn language_code(code: &str) -> Result<String, String> {
    let primary = code
        .split(['-', '_'])
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    if let Some((_, three)) = ALIASES.iter().find(|(alias, _)| *alias == primary) {
        return Ok((*three).to_owned());
    }
    if ALIASES.iter().any(|(_, three)| *three == primary) {
        return Ok(primary);
    }
    let known: Vec<&str> = ALIASES[..34].iter().map(|(two, _)| *two).collect();
    Err(format!(
        "Unknown language `{code}`: give an ISO 639-1 or 639-3 code of a measured language ({}, or their 3-letter codes).",
        known.join(", ")
    ))
}
