//! `GET /`: the status page for operators. One HTML file with its CSS and script inline,
//! compiled into the binary: no build step, no CDN, nothing else to serve. The script reads
//! `/status`, `/history` and `/leader` again whenever `/events` reports a change, and sends the
//! operator actions with a token it keeps only in memory.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use base64::Engine as _;
use sha2::{Digest, Sha256};

pub const PAGE_HTML: &str = include_str!("page.html");

/// Only the page's own inline script and style may run (by hash), it may talk only to this
/// node, and no other site may frame it: the page handles the admin token.
static CONTENT_SECURITY_POLICY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; img-src data:; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        inline_hashes(PAGE_HTML, "script"),
        inline_hashes(PAGE_HTML, "style"),
    )
});

/// The CSP source list (`'sha256-…'` each) for the inline `<tag>` elements of `html`.
fn inline_hashes(html: &str, tag: &str) -> String {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut hashes = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find(&open) {
        let body = &rest[start + open.len()..];
        let Some(end) = body.find(&close) else { break };
        let digest = Sha256::digest(&body.as_bytes()[..end]);
        let b64 = base64::engine::general_purpose::STANDARD.encode(digest);
        hashes.push(format!("'sha256-{b64}'"));
        rest = &body[end..];
    }
    if hashes.is_empty() {
        "'none'".to_string()
    } else {
        hashes.join(" ")
    }
}

pub async fn get_page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (
                header::CONTENT_SECURITY_POLICY,
                CONTENT_SECURITY_POLICY.as_str(),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        PAGE_HTML,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_small_and_self_contained() {
        assert!(PAGE_HTML.len() < 40 * 1024, "{} bytes", PAGE_HTML.len());
        for outside in ["http://", "https://", "//cdn", "src=", "@import"] {
            assert!(!PAGE_HTML.contains(outside), "the page loads `{outside}`");
        }
        for stored in [
            "localStorage",
            "sessionStorage",
            "document.cookie",
            "indexedDB",
        ] {
            assert!(!PAGE_HTML.contains(stored), "the page uses {stored}");
        }
    }

    #[test]
    fn the_policy_allows_exactly_the_inline_script_and_style() {
        let csp = CONTENT_SECURITY_POLICY.as_str();
        assert_eq!(
            inline_hashes(PAGE_HTML, "script")
                .matches("'sha256-")
                .count(),
            1
        );
        assert_eq!(
            inline_hashes(PAGE_HTML, "style")
                .matches("'sha256-")
                .count(),
            1
        );
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        // A known vector: sha256("x") in base64.
        assert_eq!(
            inline_hashes("<p><script>x</script>", "script"),
            "'sha256-LXEWQrcmsEQBYnyp+6wy9chTD7GQPMTbAiWHF5IaSIE='"
        );
        assert_eq!(inline_hashes("<p>", "script"), "'none'");
    }
}
