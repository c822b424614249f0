//! The `pilot-election` binary: parse configuration, set up tracing, run.
#![forbid(unsafe_code)]

fn main() {
    eprintln!("pilot-election: the service is not built yet; see README.md");
    std::process::exit(64);
}
