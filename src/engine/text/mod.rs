//! Text in and out: chat messages (`chat`), chat templates (`template`), tokenizers and their
//! pre-tokenizers (`tokenizer`, `pretokenize`), prompt rendering (`prompt`), thinking models'
//! reasoning (`reasoning`), stop strings (`stop`), how each family writes tool calls
//! (`tool_format`) and measured per-language token costs (`languages`).

pub mod chat;
pub(in crate::engine) mod hf_files;
pub mod languages;
pub mod pretokenize;
pub mod prompt;
pub mod reasoning;
pub mod stop;
pub mod template;
pub mod tokenizer;
#[cfg(test)]
mod tokenizer_conformance;
pub mod tool_format;
