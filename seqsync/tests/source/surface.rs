//! The public surface is the list below, and nothing else: every path a user can name, read from
//! the source along `pub mod` and `pub use` (a `#[doc(hidden)]` module, `internal`, says it is
//! not API and is skipped). A new public item fails this test until it is added here on purpose;
//! a glob re-export in a public module fails it always (it would let a surface grow unseen).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use syn::{Attribute, Item, UseTree, Visibility};

/// Every public path, `seqsync::` left out. Types, traits, functions and constants; a module
/// is listed by the items in it.
const SURFACE: &[&str] = &[
    "AnyBackend",
    "BackendError",
    "BackendKind",
    "Blocking",
    "Error",
    "EventRingbuf",
    "HostBackend",
    "Result",
    "Timeline",
    "cudarc",
    "backend::IpcEventHandle",
    "backend::MappedHost",
    "backend::IpcExport",
    "backend::IpcMemory",
    "backend::IpcMemoryHandle",
    "backend::IpcPool",
    "backend::IpcPoolExport",
    "backend::IpcPoolPointer",
    "backend::AnyBackend",
    "backend::AnyStream",
    "backend::Backend",
    "backend::BackendKind",
    "backend::CommandBackend",
    "backend::CopyOp",
    "backend::EventOptions",
    "backend::FillOp",
    "backend::MemoryBackend",
    "backend::cuda::CudaBackend",
    "backend::cuda::CudaKernel",
    "backend::cuda::DeviceBuffer",
    "backend::cuda::KernelParam",
    "backend::cuda::OpenWait",
    "backend::cuda::PinnedBuffer",
    "backend::cuda::TimelineMechanism",
    "backend::host::Chaos",
    "backend::host::HostBackend",
    "backend::host::HostStream",
    "graph::Affinity",
    "graph::CommandBuffer",
    "graph::Executable",
    "graph::Graph",
    "graph::GraphError",
    "graph::GraphExecutable",
    "graph::Lowering",
    "graph::Queues",
    "graph::Report",
    "graph::Submission",
    "graph::Submit",
    "hazard::Access",
    "hazard::Hazard",
    "hazard::HazardChecker",
    "hazard::HazardKind",
    "hazard::ValidatingBackend",
    "hazard::ValidatingKernel",
    "hazard::ValidatingStream",
    "ipc::ExportId",
    "ipc::ImportedAllocation",
    "ipc::MAX_EXPORTS",
    "ipc::Mechanism",
    "ipc::PoolAllocation",
    "ipc::SharedBuffer",
    "ipc::SharedPool",
    "ipc::SharedRing",
    "ipc::SharedTimeline",
    "memory::AllocFlags",
    "memory::Allocation",
    "memory::Block",
    "memory::NativePool",
    "memory::Point",
    "memory::Pool",
    "memory::PoolConfig",
    "memory::PoolStats",
    "memory::StreamAllocator",
    "memory::Wait",
    "memory::handoff::Ctx",
    "memory::handoff::Submitted",
    "memory::handoff::Tracked",
    "memory::handoff::TrackedStream",
    "memory::handoff::TrackingBackend",
    "memory::handoff::Use",
    "memory::handoff::end_task",
    "pipeline::CheckOptions",
    "pipeline::Consumer",
    "pipeline::ConsumerKind",
    "pipeline::LatencySummary",
    "pipeline::Op",
    "pipeline::PipelineBuilder",
    "pipeline::PipelineSpec",
    "pipeline::Place",
    "pipeline::Plan",
    "pipeline::PlanError",
    "pipeline::Prediction",
    "pipeline::Ring",
    "pipeline::RunConfig",
    "pipeline::RunLatency",
    "pipeline::RunStats",
    "pipeline::SizeBound",
    "pipeline::StageCtx",
    "pipeline::StageLatency",
    "pipeline::StagePlan",
    "pipeline::StageSpec",
    "pipeline::StageTimes",
    "pipeline::Stages",
    "pipeline::ThreadPlan",
    "pipeline::Trace",
    "pipeline::Verdict",
    "pipeline::check_deadlock",
    "pipeline::check_deadlock_with",
    "pipeline::derive",
    "pipeline::minimum_sizes",
    "pipeline::new_streams",
    "pipeline::predict",
    "pipeline::run",
    "ring::Blocking",
    "ring::EventRingbuf",
    "ring::MAX_CONSUMERS",
    "ring::MAX_SIZE",
    "timeline::MAX_VALUE",
    "timeline::Mechanism",
    "timeline::Timeline",
    "timeline::wait_all",
    "timeline::wait_any",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn is_pub(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Public(_))
}

/// `#[doc(hidden)]`, or built only for tests and doctests (`#[cfg(test)]`, `#[cfg(doctest)]`).
fn hidden(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        let arg = a.parse_args::<syn::Ident>();
        (a.path().is_ident("doc") && arg.as_ref().is_ok_and(|i| i == "hidden"))
            || (a.path().is_ident("cfg") && arg.is_ok_and(|i| i == "test" || i == "doctest"))
    })
}

fn join(module: &str, name: &str) -> String {
    if module.is_empty() {
        name.to_string()
    } else {
        format!("{module}::{name}")
    }
}

/// The names a `pub use` tree makes public in `module`.
fn use_names(tree: &UseTree, module: &str, out: &mut BTreeSet<String>, globs: &mut Vec<String>) {
    match tree {
        UseTree::Path(p) => use_names(&p.tree, module, out, globs),
        UseTree::Name(n) if n.ident == "self" => {}
        UseTree::Name(n) => {
            out.insert(join(module, &n.ident.to_string()));
        }
        UseTree::Rename(r) => {
            out.insert(join(module, &r.rename.to_string()));
        }
        UseTree::Glob(_) => globs.push(module.to_string()),
        UseTree::Group(g) => {
            for t in &g.items {
                use_names(t, module, out, globs);
            }
        }
    }
}

/// The file of module `name` declared in `dir` (`name.rs` or `name/mod.rs`), and the folder its
/// own submodules live in.
fn module_file(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let file = dir.join(format!("{name}.rs"));
    if file.exists() {
        (file, dir.join(name))
    } else {
        (dir.join(name).join("mod.rs"), dir.join(name))
    }
}

fn walk(
    items: &[Item],
    module: &str,
    dir: &Path,
    out: &mut BTreeSet<String>,
    globs: &mut Vec<String>,
) {
    for item in items {
        let (vis, ident, attrs) = match item {
            Item::Struct(i) => (&i.vis, i.ident.to_string(), &i.attrs),
            Item::Enum(i) => (&i.vis, i.ident.to_string(), &i.attrs),
            Item::Trait(i) => (&i.vis, i.ident.to_string(), &i.attrs),
            Item::Fn(i) => (&i.vis, i.sig.ident.to_string(), &i.attrs),
            Item::Const(i) => (&i.vis, i.ident.to_string(), &i.attrs),
            Item::Static(i) => (&i.vis, i.ident.to_string(), &i.attrs),
            Item::Type(i) => (&i.vis, i.ident.to_string(), &i.attrs),
            Item::Union(i) => (&i.vis, i.ident.to_string(), &i.attrs),
            Item::Use(u) => {
                if is_pub(&u.vis) && !hidden(&u.attrs) {
                    use_names(&u.tree, module, out, globs);
                }
                continue;
            }
            Item::Mod(m) => {
                if !is_pub(&m.vis) || hidden(&m.attrs) {
                    continue;
                }
                let name = m.ident.to_string();
                let path = join(module, &name);
                match &m.content {
                    Some((_, inner)) => walk(inner, &path, &dir.join(&name), out, globs),
                    None => {
                        let (file, sub) = module_file(dir, &name);
                        let text = std::fs::read_to_string(&file)
                            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                        let parsed = syn::parse_file(&text)
                            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                        walk(&parsed.items, &path, &sub, out, globs);
                    }
                }
                continue;
            }
            _ => continue,
        };
        if is_pub(vis) && !hidden(attrs) {
            out.insert(join(module, &ident));
        }
    }
}

/// Every public path of the crate, and the public modules that re-export by glob.
fn surface() -> (BTreeSet<String>, Vec<String>) {
    let lib = src().join("lib.rs");
    let parsed = syn::parse_file(&std::fs::read_to_string(&lib).unwrap()).unwrap();
    let (mut out, mut globs) = (BTreeSet::new(), Vec::new());
    walk(&parsed.items, "", &src(), &mut out, &mut globs);
    (out, globs)
}

#[test]
fn the_public_surface_is_the_listed_one() {
    let (found, globs) = surface();
    let listed: BTreeSet<String> = SURFACE.iter().map(|s| s.to_string()).collect();
    assert_eq!(listed.len(), SURFACE.len(), "SURFACE lists a path twice");
    let added: Vec<_> = found.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&found).collect();
    assert!(
        added.is_empty() && gone.is_empty(),
        "the public surface changed: public now but not listed {added:?}; listed but no longer \
         public {gone:?}. Make new items pub(crate) (or reach them through `internal`), or list \
         them in SURFACE on purpose"
    );
    assert!(
        globs.is_empty(),
        "public modules re-export by glob, which hides what they make public: {globs:?}"
    );
}

/// The walk itself finds what it should: a hidden module is skipped, a glob is caught, an
/// alias counts by its new name (the test above could not fail if the walk found nothing).
#[test]
fn the_surface_walk_reads_modules_uses_and_hidden_items() {
    let file: syn::File = syn::parse_str(
        "pub struct A; struct B; pub(crate) fn c() {}
         pub mod m { pub enum D {} pub use x::{E, F as G}; pub use y::*; }
         #[doc(hidden)] pub mod internal { pub struct H; }
         #[doc(hidden)] pub use z::I;
         #[cfg(doctest)] pub struct J;",
    )
    .unwrap();
    let (mut out, mut globs) = (BTreeSet::new(), Vec::new());
    walk(
        &file.items,
        "",
        Path::new("/nonexistent"),
        &mut out,
        &mut globs,
    );
    let names: Vec<_> = out.iter().map(String::as_str).collect();
    assert_eq!(names, ["A", "m::D", "m::E", "m::G"]);
    assert_eq!(globs, ["m"]);
    let (found, _) = surface();
    assert!(found.contains("pipeline::derive") && !found.iter().any(|p| p.starts_with("internal")));
}
