//! FAKE: a deterministic stand-in for an embedding model, for HTTP and ledger tests that run
//! without weights. Not a language model: a text's tokens are its whitespace-separated words
//! (each hashed to an id below `FAKE_VOCAB`), wrapped in `FAKE_CLS` and `FAKE_SEP` as a BERT
//! tokenizer wraps them, and a row's vector is a fixed function of its ids, scaled to unit
//! length. Equal inputs give equal vectors; its refusals are the real encoder's (the seam's
//! `EmbeddingEncoder::input_ids`, shared).

use std::collections::BTreeMap;

use super::seam::EmbeddingEncoder;
use super::EmbedError;

/// Token ids the fake knows (`0..FAKE_VOCAB`).
pub const FAKE_VOCAB: usize = 1000;
/// The ids put before and after every input.
pub const FAKE_CLS: u32 = 1;
pub const FAKE_SEP: u32 = 2;

/// The fake encoder (module doc): `dimensions`-long vectors, at most `max_tokens` tokens an
/// input, and one task prompt, `query` (`"query: "`).
pub struct FakeEncoder {
    pub dimensions: usize,
    pub max_tokens: usize,
    prompts: BTreeMap<String, String>,
}

impl FakeEncoder {
    /// A fake of `dimensions` and `max_tokens` (all-MiniLM-L6-v2's are 384 and 256).
    pub fn new(dimensions: usize, max_tokens: usize) -> Self {
        let prompts = BTreeMap::from([("query".to_owned(), "query: ".to_owned())]);
        Self {
            dimensions,
            max_tokens,
            prompts,
        }
    }

    /// The id of `word`: FNV-1a, folded below the vocabulary, above the two special ids.
    fn word_id(word: &str) -> u32 {
        let h = word.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        3 + (h % (FAKE_VOCAB as u64 - 3)) as u32
    }
}

impl EmbeddingEncoder for FakeEncoder {
    fn prompts(&self) -> &BTreeMap<String, String> {
        &self.prompts
    }

    fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    fn vocab(&self) -> usize {
        FAKE_VOCAB
    }

    fn wrap(&self) -> (u32, u32) {
        (FAKE_CLS, FAKE_SEP)
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let words = text.split_whitespace().map(Self::word_id);
        Ok(std::iter::once(FAKE_CLS)
            .chain(words)
            .chain([FAKE_SEP])
            .collect())
    }

    fn embed(&self, rows: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(rows
            .iter()
            .map(|ids| fake_vector(ids, self.dimensions))
            .collect())
    }
}

/// Component `k` sums a fixed pattern of each id; then the vector is scaled to unit length.
fn fake_vector(ids: &[u32], dimensions: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..dimensions as u64)
        .map(|k| {
            ids.iter()
                .map(|&id| ((u64::from(id) * 31 + k * 17) % 97) as f32 - 48.0)
                .sum()
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::embed::EmbedInput;

    #[test]
    fn words_and_their_ids_give_the_same_row_and_vector() {
        let f = FakeEncoder::new(8, 16);
        let text = f
            .input_ids(0, &EmbedInput::Text("hello fake world".into()), None)
            .unwrap();
        assert_eq!(text.len(), 5, "three words and the two special ids");
        let bare = EmbedInput::Tokens(text[1..4].to_vec());
        assert_eq!(f.input_ids(0, &bare, None).unwrap(), text);
        let v = f.embed(&[text.clone(), text]).unwrap();
        assert_eq!(v[0], v[1]);
        let norm: f32 = v[0].iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-5, "unit length: {norm}");
    }

    #[test]
    fn its_refusals_are_the_encoder_s() {
        let f = FakeEncoder::new(8, 4);
        let long = EmbedInput::Text("a b c".into());
        assert!(matches!(
            f.input_ids(3, &long, None),
            Err(EmbedError::TooLong {
                index: 3,
                tokens: 5,
                limit: 4
            })
        ));
        let bad = EmbedInput::Tokens(vec![5, FAKE_VOCAB as u32]);
        assert!(matches!(
            f.input_ids(1, &bad, None),
            Err(EmbedError::BadToken { index: 1, .. })
        ));
        let rows = [EmbedInput::Text("a".into()), EmbedInput::Text("b".into())];
        assert!(matches!(
            f.tokenize_within(&rows, None, 5),
            Err(EmbedError::RequestTooLong {
                index: 1,
                counted: 6,
                limit: 5
            })
        ));
    }
}
