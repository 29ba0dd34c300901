//! Placeholder until this bench is written.
fn main() {
    eprintln!("bench memory is not written yet");
    std::process::exit(1);
}
