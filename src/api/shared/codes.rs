//! Every error `code` the server answers with, one table per surface: `Code` for `/v1`,
//! `DashCode` for the dashboard's `/api/v1`. The error constructors take these, never a
//! string, and a test checks both tables against `docs/reference/errors.md` both ways (every
//! code documented, every documented code in its table).

/// Declares `Code` with one variant per `(Variant => "wire_code")` row, `Code::ALL` and
/// `Code::as_str`.
macro_rules! codes {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $wire:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $(#[doc = concat!("`", $wire, "`")] $variant,)*
        }

        impl $name {
            /// Every code, in table order.
            pub const ALL: &[$name] = &[$($name::$variant,)*];

            /// The code as it goes on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}

codes! {
    /// A stable, machine-switchable `/v1` error `code` (OpenAI's field): see
    /// `docs/reference/errors.md` for each one's status, `type` and `param`.
    Code {
        InsufficientBalance => "INSUFFICIENT_BALANCE",
        KeySpendLimit => "KEY_SPEND_LIMIT",
        AudioTooLong => "audio_too_long",
        ContextLengthExceeded => "context_length_exceeded",
        DuplicateHeader => "duplicate_header",
        DuplicateToolName => "duplicate_tool_name",
        EmptyAudio => "empty_audio",
        EngineError => "engine_error",
        EngineOverloaded => "engine_overloaded",
        ExpiredApiKey => "expired_api_key",
        FileTooLarge => "file_too_large",
        IdempotencyKeyInFlight => "idempotency_key_in_flight",
        IdempotencyKeyReused => "idempotency_key_reused",
        IdempotencyKeyWithStream => "idempotency_key_with_stream",
        ImageDecodeBusy => "image_decode_busy",
        ImageNotSupported => "image_not_supported",
        ImageTooLarge => "image_too_large",
        ImageUrlNotAllowed => "image_url_not_allowed",
        InputTooLong => "input_too_long",
        InternalError => "internal_error",
        InvalidApiKey => "invalid_api_key",
        InvalidAudio => "invalid_audio",
        InvalidBody => "invalid_body",
        InvalidFunctionParameters => "invalid_function_parameters",
        InvalidIdempotencyKey => "invalid_idempotency_key",
        InvalidImage => "invalid_image",
        InvalidJson => "invalid_json",
        InvalidJsonSchema => "invalid_json_schema",
        InvalidMessages => "invalid_messages",
        InvalidMetadata => "invalid_metadata",
        InvalidMultipart => "invalid_multipart",
        InvalidRequest => "invalid_request",
        InvalidResponseFormat => "invalid_response_format",
        InvalidTemperature => "invalid_temperature",
        InvalidToolCallId => "invalid_tool_call_id",
        InvalidToolChoice => "invalid_tool_choice",
        InvalidValue => "invalid_value",
        ItemNotFound => "item_not_found",
        LedgerUnavailable => "ledger_unavailable",
        MethodNotAllowed => "method_not_allowed",
        MissingApiKey => "missing_api_key",
        MissingFile => "missing_file",
        MissingModel => "missing_model",
        ModelCapacity => "model_capacity",
        ModelLicenseForbidsCommercialUse => "model_license_forbids_commercial_use",
        ModelNotAvailable => "model_not_available",
        ModelNotFound => "model_not_found",
        ModelNotSupported => "model_not_supported",
        ModelUnavailable => "model_unavailable",
        NoSpeakableText => "no_speakable_text",
        PromptTooLong => "prompt_too_long",
        RateLimitExceeded => "rate_limit_exceeded",
        RequestTimeout => "request_timeout",
        RequestTooLarge => "request_too_large",
        ResponseNotFound => "response_not_found",
        RevokedApiKey => "revoked_api_key",
        SchemaTooDeep => "schema_too_deep",
        ShuttingDown => "shutting_down",
        SchemaTooLarge => "schema_too_large",
        TooManyConcurrentRequests => "too_many_concurrent_requests",
        TooManyConnections => "too_many_connections",
        TooManyContentParts => "too_many_content_parts",
        TooManyImages => "too_many_images",
        TooManyMessages => "too_many_messages",
        TooManyTools => "too_many_tools",
        UnknownRoute => "unknown_route",
        UnsupportedAudioFormat => "unsupported_audio_format",
        UnsupportedContentEncoding => "unsupported_content_encoding",
        UnsupportedContentPart => "unsupported_content_part",
        UnsupportedContentType => "unsupported_content_type",
        UnsupportedGrammar => "unsupported_grammar",
        UnsupportedInputItem => "unsupported_input_item",
        UnsupportedLanguage => "unsupported_language",
        UnsupportedParameter => "unsupported_parameter",
        UnsupportedResponseFormat => "unsupported_response_format",
        UnsupportedTimestampGranularity => "unsupported_timestamp_granularity",
        UnsupportedTool => "unsupported_tool",
        UnsupportedValue => "unsupported_value",
        UnsupportedVoice => "unsupported_voice",
    }
}

codes! {
    /// A stable dashboard error `code` (`/api/v1`, `{"ok": false, "error": {"code", ...}}`):
    /// see `docs/reference/errors.md`, "Dashboard error codes".
    DashCode {
        AccountNotFound => "account_not_found",
        AdminOnly => "admin_only",
        AmountTooSmall => "amount_too_small",
        ConfirmationMismatch => "confirmation_mismatch",
        CrossSiteRequest => "cross_site_request",
        EmailNotVerified => "email_not_verified",
        EmailNotVerifiedByProvider => "email_not_verified_by_provider",
        EmailTaken => "email_taken",
        InternalError => "internal_error",
        InvalidAmount => "invalid_amount",
        InvalidBody => "invalid_body",
        InvalidCode => "invalid_code",
        InvalidCredentials => "invalid_credentials",
        InvalidEmail => "invalid_email",
        InvalidEvent => "invalid_event",
        InvalidExpiry => "invalid_expiry",
        InvalidFilter => "invalid_filter",
        InvalidName => "invalid_name",
        InvalidQuery => "invalid_query",
        InvalidReason => "invalid_reason",
        InvalidSignature => "invalid_signature",
        InvalidSpendLimit => "invalid_spend_limit",
        InvalidToken => "invalid_token",
        KeyNotFound => "key_not_found",
        MethodNotAllowed => "method_not_allowed",
        NotFound => "not_found",
        PaymentProviderError => "payment_provider_error",
        PaymentsNotConfigured => "payments_not_configured",
        SessionRequired => "session_required",
        TooManyAttempts => "too_many_attempts",
        TopupNotFound => "topup_not_found",
        TopupPending => "topup_pending",
        UnknownCheckout => "unknown_checkout",
        UnsupportedCurrency => "unsupported_currency",
        WeakPassword => "weak_password",
        WouldGoNegative => "would_go_negative",
        WrongPassword => "wrong_password",
    }
}
