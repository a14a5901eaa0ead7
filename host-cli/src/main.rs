//! `sbx`: the host command (skeleton; see issue 3).

fn main() {
    println!("sbx {}", env!("CARGO_PKG_VERSION"));
}
