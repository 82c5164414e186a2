//! Finds the OpenPMIx server library and generates its bindings, or builds the stub.
//!
//! - `DYNRES_PMIX_DISABLE=1` forces the stub (to test the path CI's fast lane takes
//!   on a machine that has libpmix-dev installed).
//! - Otherwise `pkg-config pmix` (≥ 4.2) is asked, then the known Debian paths
//!   (`/usr/lib/<triple>/pmix2/include`). When `pmix_server.h` is found and bindgen
//!   (libclang) can read it, the crate is built with `cfg(have_pmix)` and links
//!   `libpmix`; otherwise every `Server::start` returns `PmixError::Unavailable`
//!   with the reason written here into `$OUT_DIR/unavailable.txt`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo::rustc-check-cfg=cfg(have_pmix)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=DYNRES_PMIX_DISABLE");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG_PATH");
    // Installing libpmix-dev after a first build (CI's slow lane after its fast lane)
    // adds `pmix.pc` to one of these directories: the probe then runs again.
    for dir in [
        "/usr/lib/x86_64-linux-gnu/pkgconfig",
        "/usr/lib/aarch64-linux-gnu/pkgconfig",
        "/usr/lib/pkgconfig",
        "/usr/share/pkgconfig",
        "/usr/local/lib/pkgconfig",
    ] {
        if Path::new(dir).is_dir() {
            println!("cargo::rerun-if-changed={dir}");
        }
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    match probe(&out) {
        Ok(()) => {
            println!("cargo::rustc-cfg=have_pmix");
            fs::write(out.join("unavailable.txt"), "").expect("write OUT_DIR/unavailable.txt");
        }
        Err(reason) => {
            println!("cargo::warning=dynres-pmix builds its stub: {reason}");
            fs::write(out.join("unavailable.txt"), reason).expect("write OUT_DIR/unavailable.txt");
        }
    }
}

/// Where the headers and the library are.
struct Found {
    include: Vec<PathBuf>,
    link: Vec<PathBuf>,
}

fn probe(out: &Path) -> Result<(), String> {
    if env::var("DYNRES_PMIX_DISABLE").is_ok_and(|v| !v.is_empty() && v != "0") {
        return Err("DYNRES_PMIX_DISABLE is set".into());
    }
    let found = find()?;
    let header = found
        .include
        .iter()
        .map(|dir| dir.join("pmix_server.h"))
        .find(|h| h.is_file())
        .ok_or_else(|| "pmix_server.h not found (install libpmix-dev)".to_string())?;
    generate(&header, &found.include, &out.join("bindings.rs"))?;
    for dir in &found.link {
        println!("cargo::rustc-link-search=native={}", dir.display());
    }
    println!("cargo::rustc-link-lib=dylib=pmix");
    println!("cargo::rerun-if-changed={}", header.display());
    Ok(())
}

fn find() -> Result<Found, String> {
    match pkg_config::Config::new()
        .atleast_version("4.2")
        .cargo_metadata(false)
        .probe("pmix")
    {
        Ok(lib) => Ok(Found {
            include: lib.include_paths,
            link: lib.link_paths,
        }),
        Err(pkg_err) => {
            // Debian's libpmix-dev without its pkg-config file (or pkg-config missing).
            let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
            let triple = format!("{arch}-linux-gnu");
            let base = Path::new("/usr/lib").join(triple).join("pmix2");
            if base.join("include/pmix_server.h").is_file() && base.join("lib/libpmix.so").exists()
            {
                Ok(Found {
                    include: vec![base.join("include"), base.join("include/pmix")],
                    link: vec![base.join("lib")],
                })
            } else {
                Err(format!(
                    "libpmix (>= 4.2) not found: pkg-config: {}; no {}",
                    pkg_err.to_string().lines().next().unwrap_or("failed"),
                    base.join("include/pmix_server.h").display()
                ))
            }
        }
    }
}

fn generate(header: &Path, include: &[PathBuf], dest: &Path) -> Result<(), String> {
    let mut builder = bindgen::Builder::default()
        .header(header.display().to_string())
        .allowlist_function("PMIx_server_.*")
        .allowlist_function("PMIx_generate_.*")
        .allowlist_function("PMIx_Info_list_.*")
        .allowlist_function("PMIx_Data_array_destruct")
        .allowlist_function("PMIx_Value_(load|destruct)")
        .allowlist_function("PMIx_Error_string")
        .allowlist_function("PMIx_Get_version")
        .allowlist_type("pmix_server_module_t")
        .allowlist_type("pmix_(info|proc|pdata|app|value|data_array|envar|byte_object|query)_t")
        .allowlist_var("PMIX_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .layout_tests(false)
        .derive_default(false)
        .generate_comments(false)
        .prepend_enum_name(false);
    for dir in include {
        builder = builder.clang_arg(format!("-I{}", dir.display()));
    }
    // bindgen panics when libclang cannot be loaded: a missing libclang is one more
    // reason to build the stub, not a build failure.
    let generated =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()))
            .map_err(|_| "bindgen could not run (is libclang installed?)".to_string())?
            .map_err(|e| format!("bindgen failed on {}: {e}", header.display()))?;
    let text = generated.to_string();
    // Edition 2024 wants `unsafe extern` blocks.
    let text = if text.contains("unsafe extern \"C\" {") {
        text
    } else {
        text.replace("extern \"C\" {", "unsafe extern \"C\" {")
    };
    fs::write(dest, text).map_err(|e| format!("write {}: {e}", dest.display()))
}
