//! The API reference for users of `/v1`: the Markdown pages under `docs/reference/`, compiled
//! into the binary, with a plain keyword search. Served as HTML at `/reference` (`api::web`)
//! and through the MCP server's `search_reference` / `get_reference` tools and resources.
//! May use: `pulldown-cmark`. Never: HTTP, SQL, candle.

/// One reference page.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    /// Stable id, e.g. `errors` (the file name without `.md`).
    pub id: &'static str,
    /// The page's first heading.
    pub title: &'static str,
    /// Markdown.
    pub markdown: &'static str,
}

macro_rules! page {
    ($id:literal, $title:literal) => {
        Page {
            id: $id,
            title: $title,
            markdown: include_str!(concat!("../docs/reference/", $id, ".md")),
        }
    };
}

/// Every page, in reading order.
pub const PAGES: [Page; 8] = [
    page!("endpoints", "Endpoints"),
    page!("requests", "Requests"),
    page!("errors", "Errors"),
    page!("idempotency", "Idempotency"),
    page!("limits", "Limits"),
    page!("costs", "Cost rule"),
    page!("examples", "SDK examples"),
    page!("mcp", "MCP server"),
];

/// The page with this id.
pub fn page(id: &str) -> Option<&'static Page> {
    PAGES.iter().find(|p| p.id == id)
}

/// Most distinct words of a query that are looked for.
pub const MAX_WORDS: usize = 16;

/// A search hit: the page, a score (higher is better) and a snippet around the first match.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub id: &'static str,
    pub title: &'static str,
    pub score: u32,
    /// About 200 characters of the page around the first matching word.
    pub snippet: String,
}

/// Pages matching any word of `query` (case-insensitive; split at anything but letters, digits
/// and `_`; words under 2 characters ignored; at most [`MAX_WORDS`] distinct words), best first: a word in the page's title or id
/// counts 10, and its occurrences in the text count 1 each up to 3. At most `limit`.
pub fn search(query: &str, limit: usize) -> Vec<Hit> {
    let mut words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| w.chars().count() >= 2)
        .map(str::to_lowercase)
        .collect();
    words.sort_unstable();
    words.dedup();
    words.truncate(MAX_WORDS);
    let mut hits: Vec<Hit> = PAGES
        .iter()
        .filter_map(|p| {
            let text = p.markdown.to_lowercase();
            let title = p.title.to_lowercase();
            let mut score = 0u32;
            let mut first: Option<usize> = None;
            for w in &words {
                if title.contains(w.as_str()) || p.id.contains(w.as_str()) {
                    score += 10;
                }
                let n = text.matches(w.as_str()).take(3).count();
                score += u32::try_from(n).unwrap_or(3);
                if let Some(at) = text.find(w.as_str()) {
                    first = Some(first.map_or(at, |f| f.min(at)));
                }
            }
            (score > 0).then(|| Hit {
                id: p.id,
                title: p.title,
                score,
                snippet: snippet(p.markdown, first.unwrap_or(0)),
            })
        })
        .collect();
    hits.sort_by(|a, b| b.score.cmp(&a.score).then(a.id.cmp(b.id)));
    hits.truncate(limit);
    hits
}

/// About 200 characters of `text` starting a little before byte `at` (of its lowercase form,
/// which has the same char boundaries for the ASCII-only matches we look for), on one line.
fn snippet(text: &str, at: usize) -> String {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let start = text[..at]
        .char_indices()
        .rev()
        .nth(60)
        .map_or(0, |(i, _)| i);
    let s: String = text[start..].chars().take(200).collect();
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if start > 0 {
        format!("…{s}…")
    } else {
        format!("{s}…")
    }
}

/// The page rendered to HTML (CommonMark with tables). Raw HTML in the Markdown is escaped,
/// not passed through.
pub fn html(page: &Page) -> String {
    use pulldown_cmark::{Event, Options, Parser};
    let parser = Parser::new_ext(page.markdown, Options::ENABLE_TABLES).map(|e| match e {
        Event::Html(s) | Event::InlineHtml(s) => Event::Text(s),
        other => other,
    });
    let mut out = String::new();
    pulldown_cmark::html::push_html(&mut out, parser);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_starts_with_its_title() {
        for p in &PAGES {
            assert!(
                p.markdown.starts_with(&format!("# {}\n", p.title)),
                "{}",
                p.id
            );
        }
    }

    #[test]
    fn search_ranks_the_page_that_is_about_the_words() {
        let hits = search("Idempotency-Key retry", 3);
        assert_eq!(hits[0].id, "idempotency", "{hits:?}");
        assert!(hits[0].snippet.to_lowercase().contains("idempotency"));
        assert!(search("402 insufficient", 8)
            .iter()
            .any(|h| h.id == "errors"));
        assert!(search("zzzz qqqq", 8).is_empty());
        assert!(search("", 8).is_empty());
    }

    #[test]
    fn html_renders_tables_and_escapes_raw_html() {
        let p = page("errors").unwrap();
        let h = html(p);
        assert!(h.contains("<table>") && h.contains("INSUFFICIENT_BALANCE"));
        let evil = Page {
            id: "x",
            title: "x",
            markdown: "# x\n<script>alert(1)</script>\n",
        };
        assert!(!html(&evil).contains("<script>"));
    }
}
