//! `sbx`: the host command. Everything lives in the library; see [`sbx::app`].

fn main() -> std::process::ExitCode {
    sbx::app::main()
}
