//! `atoll`: the host command. Everything lives in the library; see [`atoll::app`].

fn main() -> std::process::ExitCode {
    atoll::app::main()
}
