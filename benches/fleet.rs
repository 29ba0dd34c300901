//! Placeholder until this bench is written.
fn main() {
    eprintln!("bench fleet is not written yet");
    std::process::exit(1);
}
