//! The errors an engine gives its callers (`EngineError`): the bottom floor of `engine`, so
//! every room can return them (scripts/ci/check-layers).

/// Engine errors the caller can act on.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("model `{0}` is not loaded")]
    ModelNotLoaded(String),
    #[error("the generation queue is full")]
    Overloaded,
    /// The tenant's share of the engine is taken: its account's queued jobs, or its key's
    /// queued and running sequences, are at `limit` (`runtime::tenants::TenantLimits`).
    #[error("{scope} has {limit} requests waiting or running, its most")]
    TenantLimit { scope: &'static str, limit: usize },
    #[error("the engine is shut down")]
    ShutDown,
    #[error("failed to render the chat template: {0}")]
    Template(String),
    #[error("failed to tokenize: {0}")]
    Tokenize(String),
    /// The prompt has more than `limit` tokens (the model's context less one); the count
    /// stopped at `counted`.
    #[error("the prompt has more than {limit} tokens (at least {counted})")]
    PromptTooLong { limit: usize, counted: usize },
    #[error("the output constraint does not compile: {0}")]
    Grammar(String),
    /// A fill-in-the-middle prompt (`suffix`) for a model whose vocabulary has no FIM tokens.
    #[error("the model's vocabulary has no fill-in-the-middle tokens")]
    NoFim,
    /// Thinking asked of a model that does not think (no `<think>` in its template and
    /// vocabulary).
    #[error("the model does not think")]
    NoReasoning,
    /// Image `index` of the request (`ChatInput::images`) cannot be read or is too large.
    #[error("image {index}: {message}")]
    Image {
        index: usize,
        message: String,
        /// Over the size limits (rather than unreadable).
        too_large: bool,
    },
    /// Images sent to a model without a vision part (the catalogue lets only image models
    /// through, so this is a model whose vision part is missing).
    #[error("the model does not read images")]
    NoVision,
    #[error("failed to load model `{model}`: {message}")]
    Load { model: String, message: String },
    #[error("cannot load a model of {needed} bytes: the memory budget of {budget} bytes is held by busy models")]
    NoRoom { needed: u64, budget: u64 },
    #[error("no weights could be found or fetched for model `{model}`; tried: {}", tried.join("; "))]
    Unavailable { model: String, tried: Vec<String> },
    #[error("the prompt's images were not encoded before it was submitted")]
    Unencoded,
    /// The rendered prompt has no tokens (an empty completions `prompt` for a model that adds
    /// no BOS): nothing to prefill.
    #[error("the prompt has no tokens")]
    EmptyPrompt,
    /// The server's image decode budget (`vision::budget`) had no room within its wait.
    #[error("{0}")]
    ImagesBusy(String),
    #[error("the vision encoder failed: {0}")]
    Encoder(String),
}
