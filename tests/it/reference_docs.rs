//! The reference served at `/reference` and over MCP (`docs/reference/`) against the code:
//! every route the routers register (the `/v1` ones from the OpenAPI document their routers
//! build, the others from the routers' source) is a row of `endpoints.md` and every row is a
//! route;
//! every error code of the two code tables (`Code` for `/v1`, `DashCode` for the dashboard)
//! is a row of `errors.md` under its surface's heading, and every row there is in the table.

use std::collections::BTreeSet;
use std::path::Path;

use tollgate::api::shared::codes::{Code, DashCode};

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The rows of the Markdown table(s) between heading `from` and the next `## ` heading: the
/// cells of each row, trimmed, backticks removed.
fn rows(doc: &str, from: &str) -> Vec<Vec<String>> {
    let start = doc
        .find(from)
        .unwrap_or_else(|| panic!("no heading `{from}`"));
    let body = &doc[start + from.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    body.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("|---"))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().trim_matches('`').to_owned())
                .collect()
        })
        .filter(|cells: &Vec<String>| cells[0] != "code" && cells[0] != "method")
        .collect()
}

fn first_cells(doc: &str, from: &str) -> BTreeSet<String> {
    rows(doc, from).into_iter().map(|r| r[0].clone()).collect()
}

fn compare(what: &str, in_code: &BTreeSet<String>, documented: &BTreeSet<String>) {
    let undocumented: Vec<_> = in_code.difference(documented).collect();
    let unknown: Vec<_> = documented.difference(in_code).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "{what}: in the code but not documented: {undocumented:?}; documented but not in the code: {unknown:?}"
    );
}

#[test]
fn every_v1_error_code_is_documented_and_every_documented_one_exists() {
    let doc = read("docs/reference/errors.md");
    let table: BTreeSet<String> = Code::ALL.iter().map(|c| c.as_str().to_owned()).collect();
    assert_eq!(table.len(), Code::ALL.len(), "a code is in the table twice");
    compare(
        "/v1 error codes",
        &table,
        &first_cells(&doc, "## /v1 error codes"),
    );
}

#[test]
fn every_dashboard_error_code_is_documented_and_every_documented_one_exists() {
    let doc = read("docs/reference/errors.md");
    let table: BTreeSet<String> = DashCode::ALL
        .iter()
        .map(|c| c.as_str().to_owned())
        .collect();
    assert_eq!(
        table.len(),
        DashCode::ALL.len(),
        "a code is in the table twice"
    );
    compare(
        "dashboard error codes",
        &table,
        &first_cells(&doc, "## Dashboard error codes"),
    );
}

/// The text of the call's argument list that opens at `open` (the index of its `(`).
fn call_args(text: &str, open: usize) -> &str {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &text[open + 1..open + i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced call at {open}")
}

/// `(METHOD, path)` of every `.route("path", get(..).post(..))` in `text`, under `prefix`;
/// `.nest_service("path", ..)` counts as `("*", path)` (a service answers every method).
fn routes_in(text: &str, prefix: &str, out: &mut BTreeSet<(String, String)>) {
    for (at, _) in text.match_indices(".route(") {
        let args = call_args(text, at + ".route".len());
        let path = args.split('"').nth(1).expect("a route path literal");
        let handlers = &args[args.find(',').expect("a method router")..];
        let mut found = false;
        for method in ["get", "post", "put", "patch", "delete"] {
            let called = handlers.match_indices(&format!("{method}(")).any(|(i, _)| {
                i == 0
                    || !handlers.as_bytes()[i - 1].is_ascii_alphanumeric()
                        && handlers.as_bytes()[i - 1] != b'_'
            });
            if called {
                out.insert((method.to_uppercase(), format!("{prefix}{path}")));
                found = true;
            }
        }
        assert!(found, "no method in route {path}");
    }
    for (at, _) in text.match_indices(".nest_service(") {
        let args = call_args(text, at + ".nest_service".len());
        let path = args.split('"').nth(1).expect("a service path literal");
        out.insert(("*".into(), format!("{prefix}{path}")));
    }
}

#[test]
fn every_route_is_documented_and_every_documented_route_exists() {
    // The `/v1` routers register each route with its OpenAPI operation (`api::v1`), so the
    // document lists exactly the routes they serve; the other routers are read from source.
    let mut routes = BTreeSet::new();
    let doc = tollgate::api::openapi::document(&[]);
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("operations").keys() {
            routes.insert((method.to_uppercase(), path.clone()));
        }
    }
    routes_in(&read("src/api/mod.rs"), "", &mut routes);
    routes_in(&read("src/api/web/mod.rs"), "", &mut routes);
    // The dashboard router nests its first part under `/api/v1`; the rest is at the root.
    let dashboard = read("src/api/dashboard/mod.rs");
    let split = dashboard
        .find(".nest(\"/api/v1\", api)")
        .expect("the dashboard router nests `api` under /api/v1");
    routes_in(&dashboard[..split], "/api/v1", &mut routes);
    routes_in(&dashboard[split..], "", &mut routes);

    let doc = read("docs/reference/endpoints.md");
    let documented: BTreeSet<(String, String)> = doc
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| method"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            (cells[0].to_owned(), cells[1].trim_matches('`').to_owned())
        })
        .collect();
    // A nested service is documented with the methods it answers: its path must be there.
    let services: BTreeSet<String> = routes
        .iter()
        .filter(|(m, _)| m == "*")
        .map(|(_, p)| p.clone())
        .collect();
    let routes: BTreeSet<String> = routes
        .into_iter()
        .filter(|(m, _)| m != "*")
        .map(|(m, p)| format!("{m} {p}"))
        .collect();
    let (for_services, for_routes): (Vec<_>, Vec<_>) = documented
        .into_iter()
        .partition(|(_, p)| services.contains(p));
    for s in &services {
        assert!(
            for_services.iter().any(|(_, p)| p == s),
            "the service at {s} is not documented"
        );
    }
    let documented: BTreeSet<String> = for_routes
        .into_iter()
        .map(|(m, p)| format!("{m} {p}"))
        .collect();
    compare("routes", &routes, &documented);
}
