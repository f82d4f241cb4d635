//! `AudioError`: why audio could not be decoded, or speech not transcribed.

/// Why audio could not be decoded or transcribed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AudioError {
    #[error("the audio file is empty")]
    Empty,
    #[error("unsupported audio file: {0}")]
    Unsupported(String),
    #[error("the audio file is damaged: {0}")]
    Corrupt(String),
    #[error("the audio is longer than the limit of {limit_seconds} seconds")]
    TooLong { limit_seconds: u64 },
    #[error("unknown language {0:?}: give an ISO 639-1 code such as \"en\"")]
    UnknownLanguage(String),
    #[error("speech model could not be loaded: {0}")]
    Load(String),
    /// Something the server needs is missing (`espeak-ng`, ONNX Runtime): an operator must act.
    #[error("not available on this server: {0}")]
    Unavailable(String),
    #[error("speech inference failed: {0}")]
    Inference(String),
}

impl From<candle_core::Error> for AudioError {
    fn from(e: candle_core::Error) -> Self {
        Self::Inference(e.to_string())
    }
}
