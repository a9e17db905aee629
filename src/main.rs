// glibc's allocator hands large buffers back to the kernel and faults them in again on
// every batch; mimalloc keeps them (a quarter of the engine's time in the profile).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    eligibility::cli::main()
}
