//! Writes the packages' manual pages and shell completions into a
//! directory (`make deb`, `make rpm`): `package-docs OUT`. An example, not
//! a binary of the package, so that clap_mangen and clap_complete are
//! dev-dependencies and never part of the hook.

#[path = "../packaging/docs.rs"]
mod docs;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(out), None) = (args.next(), args.next()) else {
        eprintln!("usage: package-docs OUT_DIR");
        return ExitCode::FAILURE;
    };
    let out = PathBuf::from(out);
    match docs::write_all(&out) {
        Ok(files) => {
            for file in files {
                println!("{}", file.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("package-docs: cannot write into {}: {e}", out.display());
            ExitCode::FAILURE
        }
    }
}
