//! The layers' "It may use:" headers hold: every folder of `src/` whose `mod.rs` says what it
//! may use, and everything below it, names only those parts of the crate (`crate::x`, in code,
//! not comments). A part counts as named when the header has it in backticks (`` `ring` ``,
//! `` `backend/cuda` ``) or links into it (`crate::wait_strategy`). The error type and the
//! std/loom shim (`error`, `primitive`) are below every layer, and a folder may use its own
//! layer. Layers above `backend/` also never name a concrete backend outside their tests.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The crate's top-level parts: folders and files of `src/` (`lib.rs` and the loom tests aside).
fn parts() -> BTreeSet<String> {
    std::fs::read_dir(src())
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let part = name.strip_suffix(".rs").unwrap_or(&name).to_string();
            (part != "lib" && part != "tests").then_some(part)
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The paragraph after "It may use:" in a folder's `mod.rs`, if it has one.
fn header(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("mod.rs")).ok()?;
    let mut lines = text.lines().skip_while(|l| !l.contains("It may use:"));
    let mut para = String::new();
    for l in lines.by_ref() {
        let l = l.strip_prefix("//!")?.trim();
        if l.is_empty() {
            break;
        }
        para.push(' ');
        para.push_str(l);
    }
    (!para.is_empty()).then_some(para)
}

/// The parts a header names: in backticks, or as a `crate::` link.
fn named(header: &str, parts: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, chunk) in header.split('`').enumerate() {
        let word = chunk.split(['/', '.', ':']).next().unwrap_or("");
        if i % 2 == 1 && parts.contains(word) {
            out.insert(word.to_string());
        }
    }
    for piece in header.split("crate::").skip(1) {
        let word: String = piece
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if parts.contains(&word) {
            out.insert(word);
        }
    }
    out
}

/// Code lines of a file (comments dropped), and where its unit tests begin (if they do).
fn code(path: &Path) -> (Vec<(usize, String)>, usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = Vec::new();
    let mut tests_at = usize::MAX;
    let mut prev_cfg_test = false;
    for (n, l) in text.lines().enumerate() {
        let t = l.trim_start();
        if t.starts_with("mod tests") && prev_cfg_test && tests_at == usize::MAX {
            tests_at = n;
        }
        prev_cfg_test = t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test");
        if t.starts_with("//") {
            continue;
        }
        let l = l.split("//").next().unwrap_or("");
        lines.push((n + 1, l.to_string()));
    }
    (lines, tests_at)
}

fn used(line: &str, parts: &BTreeSet<String>) -> Vec<String> {
    line.split("crate::")
        .skip(1)
        .filter_map(|piece| {
            let word: String = piece
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            parts.contains(&word).then_some(word)
        })
        .collect()
}

#[test]
fn every_layer_uses_only_what_its_header_says() {
    let parts = parts();
    let mut dirs = Vec::new();
    let mut stack = vec![src()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.ends_with("tests") {
                stack.push(p.clone());
                dirs.push(p);
            }
        }
    }
    let mut bad = Vec::new();
    let mut checked = 0;
    for dir in &dirs {
        let Some(h) = header(dir) else { continue };
        checked += 1;
        let layer = dir.strip_prefix(src()).unwrap();
        let own = layer.iter().next().unwrap().to_str().unwrap().to_string();
        let mut allowed = named(&h, &parts);
        allowed.extend(["error".to_string(), "primitive".to_string(), own.clone()]);
        let mut files = Vec::new();
        rust_files(dir, &mut files);
        for f in files {
            let (lines, tests_at) = code(&f);
            for (n, l) in &lines {
                for part in used(l, &parts) {
                    if !allowed.contains(&part) {
                        bad.push(format!(
                            "{}:{n}: uses `{part}`, which the header of {} does not name",
                            f.strip_prefix(src()).unwrap().display(),
                            layer.display()
                        ));
                    }
                }
                let concrete = [
                    "backend::cuda",
                    "backend::host",
                    "HostBackend",
                    "CudaBackend",
                ];
                if own != "backend" && *n < tests_at && concrete.iter().any(|c| l.contains(c)) {
                    bad.push(format!(
                        "{}:{n}: names a concrete backend above `backend/`",
                        f.strip_prefix(src()).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(checked >= 7, "found the headers of {checked} folders only");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The test itself: a header that names nothing allows only the shared parts, so a use of
/// another layer is caught.
#[test]
fn a_header_names_what_it_has_in_backticks_or_links() {
    let parts: BTreeSet<String> = ["ring", "backend", "timeline", "wait_strategy"]
        .map(String::from)
        .into();
    let got = named(
        "`backend`, through the [`Backend`] trait, the [wait strategy](crate::wait_strategy) \
         and `backend/cuda`",
        &parts,
    );
    assert_eq!(got, ["backend", "wait_strategy"].map(String::from).into());
    assert_eq!(
        used("let x = crate::timeline::Timeline::new();", &parts),
        ["timeline"]
    );
}

/// One CUDA driver layer: no raw driver call (`sys::cu…`) and no cudarc `result::` call outside
/// `backend/cuda/driver.rs`, in code (comments aside).
#[test]
fn raw_driver_calls_only_in_the_driver_layer() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let driver = src().join("backend").join("cuda").join("driver.rs");
    let mut found = Vec::new();
    for f in files.iter().filter(|f| **f != driver) {
        for (n, line) in code(f).0 {
            let raw = line.match_indices("sys::cu").any(|(i, _)| {
                line[i + "sys::cu".len()..].starts_with(|c: char| c.is_ascii_uppercase())
            });
            if raw || line.contains("driver::result::") || line.contains("result::malloc") {
                found.push(format!("{}:{n}: {}", f.display(), line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "raw driver calls outside driver.rs:\n{}",
        found.join("\n")
    );
}
