//! The `pilot-election` binary: everything lives in the library so that tests and the demo share
//! it; this only turns its answer into the exit code.
#![forbid(unsafe_code)]

fn main() {
    std::process::exit(pilot_election::cli::main());
}
