//! `/v1/audio/*`: `transcriptions` (transcriptions and translations, Whisper), `speech`
//! (Piper), and `format` (the transcription response bodies).

mod format;
pub mod speech;
pub mod transcriptions;
