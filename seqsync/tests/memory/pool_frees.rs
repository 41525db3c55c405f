//! Frees: an error from `free` means the block was not freed (it can be freed again), also when
//! the pool's housekeeping meets a failed stream; a block freed once is a double free even
//! after its address was handed out again (the later owner's block stays allocated).
use seqsync::memory::{Pool, PoolConfig};
use seqsync::{Error, HostBackend};

#[test]
fn an_error_from_free_means_not_freed() {
    let host = HostBackend::new();
    let (a, b) = (host.new_stream("a").unwrap(), host.new_stream("b").unwrap());
    let p = Pool::new(
        &host,
        "p",
        PoolConfig {
            release_threshold: 0,
            ..PoolConfig::fixed_blocks(4096, 4)
        },
    )
    .unwrap();
    let x = p.alloc(&a, 4096, &[]).unwrap();
    let y = p.alloc(&b, 4096, &[]).unwrap();
    a.launch(|| panic!("a kernel on stream a failed"));
    assert!(a.synchronize().is_err());
    let _ = p.free(&a, x.block, &[]);
    let r = p.free(&b, y.block, &[]); // healthy stream, unrelated block
    if let Err(e) = &r {
        // The contract: an error means the block stays allocated and can be freed again.
        let again = p.free(&b, y.block, &[]);
        assert!(
            !matches!(again, Err(Error::DoubleFree { .. })),
            "free returned `{e}` but had freed the block"
        );
    }
    assert!(r.is_ok(), "{r:?}");
    assert!(p.trim_to(0).is_ok());
}

#[test]
fn a_double_free_after_reuse_is_named() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let p = Pool::new(&host, "p", PoolConfig::default()).unwrap();
    let a = p.alloc(&s, 4096, &[]).unwrap().block;
    p.free(&s, a, &[]).unwrap();
    let b = p.alloc(&s, 4096, &[]).unwrap().block; // same stream: reused
    assert_eq!(a.addr(), b.addr());
    let e = p.free(&s, a, &[]); // `a` was freed already
    assert!(
        matches!(e, Err(Error::DoubleFree { .. })),
        "{e:?}: b's block was freed under b"
    );
}
