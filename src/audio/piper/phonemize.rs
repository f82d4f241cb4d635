//! Text to IPA phonemes with the `espeak-ng` program, the way Piper voices were trained:
//! sentences of clauses, each clause's phonemes followed by its punctuation.
//!
//! `espeak-ng` runs as a subprocess (`espeak-ng -q --ipa -v VOICE`, text on stdin), so its GPL
//! code stays out of our binary. Stock `espeak-ng` does not report the punctuation that ended
//! a clause (Piper uses a patched library for that), so we split clauses ourselves, phonemize
//! each on its own, and put the punctuation back, as Piper's `phonemize_espeak` does
//! (rhasspy/piper-phonemize, `src/phonemize.cpp`).

use std::io::Write;
use std::process::{Command, Stdio};

use crate::audio::error::AudioError;

/// Where a sentence is cut when it has no punctuation for this many characters (at the next
/// space), so one `espeak-ng` call reads a sentence-sized piece where the text has spaces.
const MAX_SENTENCE_CHARS: usize = 400;

/// Most phonemes (characters of `espeak-ng`'s IPA) in one voice-model run, about 10 s of
/// speech. A run's memory grows with this length and ONNX Runtime's arena keeps the largest
/// run's (measured, 512 CJK characters: 154 MB kept at 128, 182 MB at 192, 312 MB at 256, at
/// the same speed), so it bounds a synthesis's memory whatever the text's script: one CJK
/// character reads as about 15 phonemes ("Chinese letter") and text without spaces is never
/// cut by `MAX_SENTENCE_CHARS`. Longer English sentences (past about 180 characters) are cut
/// at a word.
pub const MAX_CHUNK_PHONEMES: usize = 192;

/// One clause of the input text and the punctuation that ended it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clause {
    pub text: String,
    /// `.`, `!`, `?`, `,`, `;` or `:`; `None` at a cut without punctuation.
    pub end: Option<char>,
}

/// Split `text` into sentences of clauses. A clause ends at `.`, `!`, `?`, `,`, `;` or `:`
/// followed by whitespace or the end (so `3.5` and `e.g.x` stay whole), a sentence at the first
/// three; a sentence longer than `MAX_SENTENCE_CHARS` is cut at a space. Empty clauses are
/// dropped.
pub fn sentences(text: &str) -> Vec<Vec<Clause>> {
    let chars: Vec<char> = text.chars().collect();
    let (mut out, mut sentence, mut clause) = (Vec::new(), Vec::new(), String::new());
    let mut sentence_len = 0usize;
    let push = |clause: &mut String, end: Option<char>, sentence: &mut Vec<Clause>| {
        let t = clause.split_whitespace().collect::<Vec<_>>().join(" ");
        clause.clear();
        if t.chars().any(char::is_alphanumeric) {
            sentence.push(Clause { text: t, end });
        }
    };
    for (i, &c) in chars.iter().enumerate() {
        let next_is_space = chars.get(i + 1).is_none_or(|n| n.is_whitespace());
        sentence_len += 1;
        match c {
            '.' | '!' | '?' | ',' | ';' | ':' if next_is_space => {
                push(&mut clause, Some(c), &mut sentence);
                if matches!(c, '.' | '!' | '?') && !sentence.is_empty() {
                    out.push(std::mem::take(&mut sentence));
                    sentence_len = 0;
                }
            }
            c if c.is_whitespace() && sentence_len > MAX_SENTENCE_CHARS => {
                push(&mut clause, None, &mut sentence);
                if !sentence.is_empty() {
                    out.push(std::mem::take(&mut sentence));
                }
                sentence_len = 0;
            }
            c => clause.push(c),
        }
    }
    push(&mut clause, Some('.'), &mut sentence);
    if !sentence.is_empty() {
        out.push(sentence);
    }
    out
}

/// Whether an `espeak-ng` executable is on `PATH`.
pub fn espeak_available() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join("espeak-ng").is_file()))
}

/// The IPA phonemes of one clause: `espeak-ng`'s lines (it may split further, at "Dr." say)
/// joined by spaces.
///
/// # Errors
/// `Unavailable` when `espeak-ng` cannot be started; `Inference` when it fails.
pub fn clause_phonemes(text: &str, espeak_voice: &str) -> Result<String, AudioError> {
    let mut child = Command::new("espeak-ng")
        .args(["-q", "--ipa", "-v", espeak_voice])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| AudioError::Unavailable(format!("espeak-ng could not be started: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| AudioError::Inference(format!("espeak-ng stdin: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| AudioError::Inference(format!("espeak-ng: {e}")))?;
    if !out.status.success() {
        return Err(AudioError::Inference(format!(
            "espeak-ng exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" "))
}

/// Whether `text` has anything to speak: a clause with a letter or digit (`sentences` drops
/// the rest, such as emoji and punctuation). Cheap: no `espeak-ng` call.
pub fn has_speech(text: &str) -> bool {
    !sentences(text).is_empty()
}

/// `phonemes` cut into pieces of at most `max` characters: at the last space (a word boundary
/// in `espeak-ng`'s IPA) that leaves a piece of at least half of `max`, else exactly at `max`.
/// Pieces are trimmed; empty ones dropped. A cut piece ends with `.` so the voice closes it
/// as it closes a sentence.
pub fn chunks(phonemes: &str, max: usize) -> Vec<String> {
    let max = max.max(2);
    let chars: Vec<char> = phonemes.chars().collect();
    let mut out = Vec::new();
    let mut rest = &chars[..];
    while rest.len() > max {
        let cut = rest[max / 2..max]
            .iter()
            .rposition(|c| *c == ' ')
            .map_or(max - 1, |i| max / 2 + i);
        let piece: String = rest[..cut].iter().collect();
        let piece = piece.trim();
        if !piece.is_empty() {
            out.push(format!("{piece}."));
        }
        rest = &rest[cut..];
    }
    let last: String = rest.iter().collect();
    if !last.trim().is_empty() {
        out.push(last.trim().to_owned());
    }
    out
}

/// The phoneme strings of `text`, one per voice-model run: each sentence's clauses as
/// phonemes, each followed by its punctuation and a space (Piper's layout: `"həlˈoʊ,
/// wˈɜːld."`), a sentence longer than `MAX_CHUNK_PHONEMES` cut by `chunks`.
///
/// # Errors
/// As `clause_phonemes`.
pub fn phonemize(text: &str, espeak_voice: &str) -> Result<Vec<String>, AudioError> {
    let mut out = Vec::new();
    for sentence in sentences(text) {
        let mut s = String::new();
        for (i, clause) in sentence.iter().enumerate() {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(&clause_phonemes(&clause.text, espeak_voice)?);
            // A cut without punctuation reads as the end of a sentence.
            s.push(clause.end.unwrap_or('.'));
        }
        out.extend(chunks(&s, MAX_CHUNK_PHONEMES));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(text: &str) -> Vec<Vec<(String, Option<char>)>> {
        sentences(text)
            .into_iter()
            .map(|s| s.into_iter().map(|c| (c.text, c.end)).collect())
            .collect()
    }

    #[test]
    fn sentences_split_at_punctuation_followed_by_space() {
        let got = texts("Hello there, world. It costs 3.5 dollars; really?  Yes");
        assert_eq!(
            got,
            vec![
                vec![
                    ("Hello there".to_string(), Some(',')),
                    ("world".to_string(), Some('.'))
                ],
                vec![
                    ("It costs 3.5 dollars".to_string(), Some(';')),
                    ("really".to_string(), Some('?'))
                ],
                vec![("Yes".to_string(), Some('.'))],
            ]
        );
    }

    #[test]
    fn punctuation_only_and_empty_text_have_no_sentences() {
        assert!(sentences("").is_empty());
        assert!(sentences(" ... !? ").is_empty());
    }

    #[test]
    fn emoji_and_punctuation_alone_have_no_speech() {
        assert!(!has_speech("😀😀😀"));
        assert!(!has_speech(" ... !? "));
        assert!(has_speech("😀 ok"));
        assert!(has_speech("中"));
    }

    #[test]
    fn phonemes_are_cut_at_word_boundaries_and_hard_without_spaces() {
        // Words of 7 phonemes: every piece is cut at a space, between half of and `max`.
        let words = "tʃˈaɪnz ".repeat(200);
        let got = chunks(&words, 100);
        assert!(got.len() >= 16, "{} pieces", got.len());
        for p in &got {
            let n = p.chars().count();
            assert!(n <= 100 && !p.starts_with(' '), "{n}: {p:?}");
        }
        let joined: String = got.concat();
        assert_eq!(
            joined.chars().filter(|c| *c == 'ʃ').count(),
            200,
            "nothing is lost"
        );
        // No space at all: exact cuts, every phoneme kept.
        let solid = "a".repeat(1000);
        let got = chunks(&solid, 100);
        assert_eq!(got.len(), 11);
        assert!(got.iter().all(|p| p.chars().count() <= 100));
        assert_eq!(
            got.iter().map(|p| p.matches('a').count()).sum::<usize>(),
            1000
        );
        // Short input: one piece, as it was.
        assert_eq!(chunks("həlˈoʊ, wˈɜːld.", 100), ["həlˈoʊ, wˈɜːld."]);
        assert!(chunks("   ", 100).is_empty());
    }

    #[test]
    fn a_long_sentence_without_punctuation_is_cut_at_a_space() {
        let text = "word ".repeat(200);
        let got = sentences(&text);
        assert!(got.len() >= 2, "{} sentences", got.len());
        for s in &got {
            let n: usize = s.iter().map(|c| c.text.chars().count()).sum();
            assert!(n <= MAX_SENTENCE_CHARS + 5, "{n} chars");
        }
    }
}
