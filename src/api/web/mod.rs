//! The web dashboard's pages: one HTML page, its ES modules (one per concern, no build step)
//! and stylesheet, embedded in the binary at build time (`include_str!`: a handful of files
//! need no asset crate) and served at `/`,
//! `/reset` (the e-mailed reset link) and `/assets/*`; and the API reference at `/reference`, with a strict Content-Security-Policy
//! (same-origin scripts, styles and connections only; no framing) and no Referer leakage of
//! link tokens. The page talks only to `/api/v1` and `/v1`.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::shared::headers::CSP;
use super::shared::state::AppState;

const INDEX: &str = include_str!("index.html");
const APP_CSS: &str = include_str!("app.css");
/// The dashboard's ES modules, served at `/assets/<name>`: `app.js` routes and imports the
/// others.
const MODULES: [(&str, &str); 11] = [
    ("app.js", include_str!("app.js")),
    ("core.js", include_str!("core.js")),
    ("models.js", include_str!("models.js")),
    ("account.js", include_str!("account.js")),
    ("keys.js", include_str!("keys.js")),
    ("activity.js", include_str!("activity.js")),
    ("playground.js", include_str!("playground.js")),
    ("chat.js", include_str!("chat.js")),
    ("code.js", include_str!("code.js")),
    ("panels.js", include_str!("panels.js")),
    ("admin.js", include_str!("admin.js")),
];

fn asset(body: impl Into<axum::body::Body>, content_type: &'static str) -> Response {
    let mut r = body.into().into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

async fn index() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

/// `GET /reference`: the API reference pages (`crate::reference`) rendered on the server, one
/// after another with a table of contents.
async fn reference_page() -> Response {
    let mut toc = String::new();
    let mut body = String::new();
    for p in &crate::reference::PAGES {
        toc.push_str(&format!(
            "<li><a href=\"#{id}\">{t}</a></li>",
            id = p.id,
            t = p.title
        ));
        body.push_str(&format!(
            "<section id=\"{}\">{}</section>",
            p.id,
            crate::reference::html(p)
        ));
    }
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>tollgate API reference</title><link rel=\"stylesheet\" href=\"/assets/app.css\"></head><body><header><a class=\"brand\" href=\"/#/\">tollgate</a><nav aria-label=\"Main\"><a href=\"/#/models\">Models &amp; prices</a><a href=\"/reference\" aria-current=\"page\">API reference</a></nav></header><main id=\"main\" class=\"reference\"><h1>API reference</h1><p>The machine-readable form: <a href=\"/v1/openapi.json\">OpenAPI 3.1 document</a>. Coding assistants can read these pages through the MCP server at <code>/mcp</code>.</p><nav aria-label=\"Pages\"><ul>{toc}</ul></nav>{body}</main></body></html>"
    );
    asset(html, "text/html; charset=utf-8")
}

/// `GET /assets/{name}`: one of the dashboard's modules or its stylesheet; anything else 404.
async fn module(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    if name == "app.css" {
        return asset(APP_CSS, "text/css; charset=utf-8");
    }
    match MODULES.iter().find(|(n, _)| *n == name) {
        Some((_, js)) => asset(*js, "text/javascript; charset=utf-8"),
        None => (axum::http::StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

/// The pages' routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/reset", get(index))
        .route("/reference", get(reference_page))
        .route("/assets/{name}", get(module))
}
