//! Text in and out: chat messages (`chat`), chat templates (`template`), tokenizers and their
//! pre-tokenizers (`tokenizer`, `pretokenize`), prompt rendering (`prompt`), stop strings
//! (`stop`) and measured per-language token costs (`languages`).

pub mod chat;
pub mod languages;
pub mod pretokenize;
pub mod prompt;
pub mod stop;
pub mod template;
pub mod tokenizer;
#[cfg(test)]
mod tokenizer_conformance;
