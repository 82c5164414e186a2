//! The `dynres` command line. Until the launcher lands it only explains itself.

fn main() {
    eprintln!("dynres: the launcher is not built yet (issue 7); see README.md");
    std::process::exit(2);
}
