fn main() -> std::process::ExitCode {
    eligibility::cli::main()
}
