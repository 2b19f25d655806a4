//! The page's stylesheet, script and icon, compiled into the binary: the page needs nothing
//! from the network, so it works air-gapped.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("assets/ui.css");
const JS: &str = include_str!("assets/ui.js");
const ICON: &str = include_str!("assets/favicon.svg");

pub async fn serve(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "ui.css" => (CSS, "text/css; charset=utf-8"),
        "ui.js" => (JS, "text/javascript; charset=utf-8"),
        "favicon.svg" => (ICON, "image/svg+xml"),
        _ => return (StatusCode::NOT_FOUND, format!("no asset {file}\n")).into_response(),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}
