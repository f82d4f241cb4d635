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
    /// The text has nothing the voice can speak (emoji, symbols, punctuation only).
    #[error("the text has nothing to speak")]
    NoSpeech,
    /// The text would take longer to say than one request may (seconds at its speed).
    #[error("the speech would last about {seconds} s, more than the limit of {limit_seconds} s")]
    SpeechTooLong { seconds: u64, limit_seconds: u32 },
    /// A Whisper `prompt` over the model's limit (tokens).
    #[error("the prompt is longer than {limit_tokens} tokens")]
    PromptTooLong { limit_tokens: usize },
    /// A stream whose sample rate is outside what we decode (Hz), or 0.
    #[error("sample rate {rate} Hz is outside {min}-{max} Hz")]
    SampleRate { rate: u64, min: u32, max: u32 },
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
