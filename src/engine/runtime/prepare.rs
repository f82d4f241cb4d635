//! A request's prompt for a loaded model (`Engine::prepare`): its images' headers read within
//! the server's image bounds (`ImageBounds`; no pixel decoded until the money is held), the
//! chat template rendered with each image's tokens, the prompt tokenized within the context,
//! and the output constraint compiled; and the prompt's fewest tokens whatever its images turn
//! out to be (`prompt_floor`, for checks before a remote image is fetched).
//!
//! Owns: turning a `ChatInput` into a `Prompt` for one `Front`. May use: `text`, `vision`,
//! `constrain`. Never: the scheduler thread, HTTP, money.

use super::front::Front;
use crate::engine::constrain::grammar::{GrammarEnv, GrammarSpec, Start};
use crate::engine::constrain::tools::{ToolFormat, ToolSyntax};
use crate::engine::error::EngineError;
use crate::engine::seam::Prompt;
use crate::engine::text::chat::{ChatInput, OutputConstraint, ToolChoice};
use crate::engine::vision::{expand_at_least, ImageBounds, ImageError, Images, PlaceError};

/// The prompt of `input` with its constraint compiled: a JSON Schema, or the tool-call grammar
/// of the model's format (with the `auto` trigger), or the trigger banned under `none`. The
/// prompt leaves room for at least one generated token in the model's context. Its images are
/// only probed (`Images::read` within `bounds` and the model's pixel cap); their pixels wait in
/// `Prompt::pending_images`.
///
/// # Errors
/// As `Engine::prepare`; `EmptyPrompt` when the prompt has no tokens at all.
pub(super) fn constrained_prompt(
    f: &Front,
    model: &str,
    input: &ChatInput,
    bounds: &ImageBounds,
) -> Result<Prompt, EngineError> {
    let images = match (input.images.is_empty(), &f.vision) {
        (true, _) => None,
        (false, None) => return Err(EngineError::NoVision),
        (false, Some(vision)) => {
            let limits = vision.limits(&bounds.per_image);
            let read = Images::read(vision, &input.images, &limits, bounds.request_bytes);
            Some((vision, read.map_err(place_error)?))
        }
    };
    let expand = |text: String| match &images {
        None => Ok(text),
        Some((vision, images)) => images.expand(vision, &text).map_err(place_error),
    };
    let (ids, reasoning) = prompt_ids(f, input, &expand)?;
    let placed = match images {
        None => (Vec::new(), None),
        Some((vision, images)) => {
            let token = f
                .tokenizer
                .tokenizer
                .token_to_id(vision.image_token())
                .ok_or_else(|| {
                    EngineError::Tokenize(format!("no `{}` token", vision.image_token()))
                })?;
            let (placed, pending) = images.place(vision, &ids, token).map_err(place_error)?;
            (placed, Some(pending))
        }
    };
    let mut prompt = Prompt::plain(model, ids, f.context_length);
    (prompt.images, prompt.pending_images) = placed;
    prompt.reasoning = reasoning;
    prompt.vocab_size = Some(f.tokenizer.tokenizer.get_vocab_size(true));
    if let Some(text) = &input.prediction {
        prompt.prediction =
            crate::engine::text::prompt::prediction_ids(&f.tokenizer, text, f.context_length)?;
    }
    let env = || {
        f.grammar_env
            .get_or_init(|| GrammarEnv::new(f.tokenizer.clone()))
            .as_ref()
            .map_err(|e| EngineError::Grammar(e.clone()))
    };
    match &input.constraint {
        None => {}
        Some(OutputConstraint::Json(schema)) => {
            let g = env()?
                .compile(GrammarSpec::JsonSchema(schema.clone()), Start::Now)
                .map_err(EngineError::Grammar)?;
            prompt.grammar = Some(Box::new(g));
        }
        Some(OutputConstraint::Tools {
            choice,
            parallel,
            answer,
        }) => {
            let format = ToolFormat::for_model(&f.id);
            if *choice == ToolChoice::None {
                let ids = f.tokenizer.encode(format.trigger()).unwrap_or_default();
                if ids.len() == 1 {
                    prompt.banned_tokens = ids;
                }
            } else if let Some((spec, start)) =
                format.grammar(&input.tools, choice, *parallel, answer.as_ref())
            {
                let g = env()?.compile(spec, start).map_err(EngineError::Grammar)?;
                prompt.grammar = Some(Box::new(g));
                prompt.tool_syntax = Some(ToolSyntax {
                    format,
                    names: input.tools.iter().map(|t| t.name.clone()).collect(),
                });
            }
        }
    }
    Ok(prompt)
}

/// The fewest tokens `input`'s prompt can have, whatever its images turn out to be: each image
/// counted as its family's cheapest (`VisionModel::min_grid`), none of them read. For the
/// balance and context checks of a request whose images are still to be fetched.
///
/// # Errors
/// As `constrained_prompt`, but for the images' own errors (none is read).
pub(super) fn prompt_floor(f: &Front, input: &ChatInput) -> Result<usize, EngineError> {
    let vision = match (input.images.is_empty(), &f.vision) {
        (true, _) => None,
        (false, None) => return Err(EngineError::NoVision),
        (false, Some(vision)) => Some(vision),
    };
    let n = input.images.len();
    let expand = |text: String| match vision {
        None => Ok(text),
        Some(vision) => expand_at_least(vision, &text, n).map_err(place_error),
    };
    Ok(prompt_ids(f, input, &expand)?.0.len())
}

/// The prompt ids of `input` with its image placeholders `expand`ed, within the model's
/// context less one token, and how it reasons.
///
/// # Errors
/// As `text::prompt::rendered_prompt_with`; `EmptyPrompt` for a prompt of no tokens.
fn prompt_ids(
    f: &Front,
    input: &ChatInput,
    expand: &dyn Fn(String) -> Result<String, EngineError>,
) -> Result<(Vec<u32>, Option<crate::engine::text::reasoning::Reasoning>), EngineError> {
    let limit = f.context_length.saturating_sub(1);
    let (ids, reasoning) = crate::engine::text::prompt::rendered_prompt_with(
        &f.id,
        &f.tokenizer,
        &f.template,
        input,
        limit,
        expand,
    )?;
    if ids.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    Ok((ids, reasoning))
}

/// A request's images that do not fit its prompt, as the engine's error.
pub(super) fn place_error(e: PlaceError) -> EngineError {
    match e {
        PlaceError::Image { index, error } => EngineError::Image {
            index,
            message: error.to_string(),
            too_large: matches!(
                error,
                ImageError::TooLarge { .. }
                    | ImageError::TooManyBytes { .. }
                    | ImageError::RequestTooLarge { .. }
            ),
        },
        PlaceError::Busy(b) => EngineError::ImagesBusy(b.to_string()),
        PlaceError::Count { .. } => EngineError::Template(e.to_string()),
        PlaceError::Encoder(m) => EngineError::Encoder(m),
        other => EngineError::Tokenize(other.to_string()),
    }
}
