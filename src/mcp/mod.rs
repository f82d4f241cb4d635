//! The Model Context Protocol server (`docs/reference/mcp.md`): read-only tools
//! and resources over the catalogue, prices, measured language costs and the API reference,
//! for coding assistants, without a key. Built on the official Rust SDK `rmcp`: streamable HTTP
//! at `/mcp` (mounted by `api`, with rmcp's Host allow-list against DNS rebinding) and stdio
//! (`tollgate mcp --stdio`).
//!
//! Owns: the tools' inputs, outputs and schemas (`tools`), the resources and the server info.
//! May use: `catalog`, `billing` (the cost rule), `engine` (the trait, to count tokens exactly
//! as billed; tokenizers), `reference`. Never: `ledger`, `api`, axum.

mod audio_tools;
mod data;
mod embedding_tools;
mod estimate;
mod language;
mod schema;
mod tools;

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    Implementation, ListResourcesResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{
    tool, tool_handler, tool_router, ErrorData, Json, RoleServer, ServerHandler, ServiceExt,
};

use crate::catalog::record::ModelRecord;
use crate::reference;
pub use data::McpData;
use estimate::{Estimate, EstimateArgs};
pub use tools::{page_uri, COST_RULE};
use tools::{
    LanguageArgs, LanguageCosts, ListModelsArgs, ModelId, ModelList, PageId, PriceList,
    ReferencePage, SearchArgs, SearchResults,
};

/// Settings of `/mcp`.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// `Host` names accepted (with or without a port); others get 403 (DNS rebinding).
    pub allowed_hosts: Vec<String>,
    /// Reference tokenizers (`data/tokenizers`) for `estimate_cost` when weights are absent.
    pub tokenizers_dir: PathBuf,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            tokenizers_dir: PathBuf::from("data/tokenizers"),
        }
    }
}

/// URI of the OpenAPI document resource.
pub const OPENAPI_URI: &str = "tollgate://openapi.json";

/// The MCP server: one per session, sharing [`McpData`].
pub struct TollgateMcp {
    data: Arc<McpData>,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl TollgateMcp {
    /// A server over `data`.
    pub fn new(data: Arc<McpData>) -> Self {
        Self {
            data,
            tool_router: Self::tool_router(),
        }
    }

    /// List the models this server sells, chat and embedding (`kind`), with prices (USD per 1M
    /// tokens), licence flags and whether each is servable here; filter by kind, maker, family,
    /// input modality, maximum price, commercial use or minimum context, and sort by id, price
    /// or context.
    #[tool(annotations(read_only_hint = true, open_world_hint = false))]
    async fn list_models(
        &self,
        Parameters(a): Parameters<ListModelsArgs>,
    ) -> Result<Json<ModelList>, String> {
        // Availability looks at files and, once, whether the hub answers: off the async workers.
        let data = self.data.clone();
        tokio::task::spawn_blocking(move || data.list_models(&a))
            .await
            .map_err(|e| format!("list_models task: {e}"))?
            .map(Json)
    }

    /// One model's full record, exactly as `GET /v1/models/{id}` returns it (prices, context,
    /// licence, supported request fields, measured language multipliers).
    #[tool(annotations(read_only_hint = true, open_world_hint = false))]
    async fn get_model(
        &self,
        Parameters(a): Parameters<ModelId>,
    ) -> Result<Json<ModelRecord>, String> {
        self.data.get_model(&a.id).map(Json)
    }

    /// The price list: USD and integer micro-USD per 1M input and output tokens for every
    /// chat model, with the rule that turns tokens into a charge; speech models per minute of
    /// audio or per 1M characters (`audio_prices`); embedding models per 1M input tokens
    /// (`embedding_prices`).
    #[tool(annotations(read_only_hint = true, open_world_hint = false))]
    async fn get_prices(&self) -> Json<PriceList> {
        Json(self.data.get_prices())
    }

    /// Estimate what a request costs: prompt tokens (counted with the model's chat template
    /// and tokenizer when its weights are on this server, or given), expected output tokens,
    /// and the cost in micros and USD by the same rule the ledger charges with; also the amount
    /// a request reserves up front (`hold_micros`: a balance below it gets 402) and whether it
    /// fits the model's context. The text's language is detected unless given. For a speech
    /// model: `audio_seconds` (transcription) or `input` (text to speak); for an embedding
    /// model: `input` (the text to embed) or `prompt_tokens`.
    #[tool(annotations(read_only_hint = true, open_world_hint = false))]
    async fn estimate_cost(
        &self,
        Parameters(a): Parameters<EstimateArgs>,
    ) -> Result<Json<Estimate>, String> {
        let data = self.data.clone();
        tokio::task::spawn_blocking(move || data.estimate_cost(&a))
            .await
            .map_err(|e| format!("the estimate failed: {e}"))?
            .map(Json)
    }

    /// Measured token cost per language: tokens per 1,000 characters and the multiplier vs
    /// English for the same text, per model, with the tokenizer it was measured with.
    #[tool(annotations(read_only_hint = true, open_world_hint = false))]
    async fn language_costs(
        &self,
        Parameters(a): Parameters<LanguageArgs>,
    ) -> Result<Json<LanguageCosts>, String> {
        self.data.language_costs(&a).map(Json)
    }

    /// Search the API reference (endpoints, requests, errors, idempotency, limits, the cost
    /// rule, SDK examples, this MCP server) for words; returns page ids for `get_reference`.
    #[tool(annotations(read_only_hint = true, open_world_hint = false))]
    async fn search_reference(&self, Parameters(a): Parameters<SearchArgs>) -> Json<SearchResults> {
        Json(self.data.search_reference(&a))
    }

    /// One page of the API reference, as Markdown.
    #[tool(annotations(read_only_hint = true, open_world_hint = false))]
    async fn get_reference(
        &self,
        Parameters(a): Parameters<PageId>,
    ) -> Result<Json<ReferencePage>, String> {
        self.data.get_reference(&a.id).map(Json)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TollgateMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
            .with_server_info(Implementation::new("tollgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "tollgate sells open-weight language models through an OpenAI-compatible API (base URL: this server + /v1; an API key from the dashboard). Use list_models/get_prices to choose a model, estimate_cost before sending large prompts, language_costs for non-English text, and search_reference/get_reference for endpoints, errors, idempotency, limits and SDK examples.",
            )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut list: Vec<Resource> = reference::PAGES
            .iter()
            .map(|p| {
                Resource::new(page_uri(p.id), p.id)
                    .with_description(p.title)
                    .with_mime_type("text/markdown")
            })
            .collect();
        list.push(
            Resource::new(OPENAPI_URI, "openapi")
                .with_description("OpenAPI 3.1 document of the /v1 API")
                .with_mime_type("application/json"),
        );
        Ok(ListResourcesResult::with_all_items(list))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.as_str();
        let (text, mime) = if uri == OPENAPI_URI {
            (self.data.openapi.clone(), "application/json")
        } else {
            let page = uri
                .strip_prefix("tollgate://reference/")
                .and_then(reference::page)
                .ok_or_else(|| {
                    ErrorData::resource_not_found(format!("no resource `{uri}`"), None)
                })?;
            (page.markdown.to_owned(), "text/markdown")
        };
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, request.uri.clone()).with_mime_type(mime)
        ])
        .into())
    }
}

/// Origins (`http` and `https`, any port) of the allowed hosts: a browser page elsewhere cannot
/// call `/mcp`; clients that send no `Origin` (assistants, SDKs) are not affected.
pub fn allowed_origins(allowed_hosts: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for h in allowed_hosts {
        let v6 = h.parse::<std::net::Ipv6Addr>().is_ok();
        // `host:port` entries allow that port only; bare hosts any port.
        let with_port = !v6 && h.contains(':');
        let h = if v6 { format!("[{h}]") } else { h.clone() };
        // A bare host is written `:*` (any port) explicitly: rmcp warns about portless
        // entries, whose meaning it is changing to the scheme's default port.
        let port = if with_port { "" } else { ":*" };
        for scheme in ["http", "https"] {
            out.push(format!("{scheme}://{h}{port}"));
        }
    }
    out
}

/// The streamable HTTP transport for `/mcp`: a tower service (mount with `nest_service`).
/// Requests whose `Host` is not in `allowed_hosts` (an entry without a port matches any port),
/// or whose `Origin` is not one of those hosts, get 403: rmcp's protection against DNS
/// rebinding and cross-site calls.
pub fn http_service(
    data: Arc<McpData>,
    allowed_hosts: Vec<String>,
) -> StreamableHttpService<TollgateMcp, LocalSessionManager> {
    let origins = allowed_origins(&allowed_hosts);
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts)
        .with_allowed_origins(origins);
    StreamableHttpService::new(
        move || Ok(TollgateMcp::new(data.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// Serve MCP over stdin/stdout until the client closes it (logs must go to stderr).
///
/// # Errors
/// The client's initialization failed, or the transport broke.
pub async fn serve_stdio(data: Arc<McpData>) -> Result<(), String> {
    let running = TollgateMcp::new(data)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| e.to_string())?;
    running.waiting().await.map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests;
