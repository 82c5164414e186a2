fn main() {
    for _ in 0..3 {
        let t = std::time::Instant::now();
        dynres_transports::shm::segment::reap_stale();
        let a = t.elapsed();
        let _ = 0;
        let a2 = t.elapsed();
        let d = dynres_transports::shm::ShmDevice::new(Default::default()).unwrap();
        let b = t.elapsed();
        let tcp = dynres_transports::tcp::TcpDevice::new(Default::default()).unwrap();
        let c = t.elapsed();
        println!("reap={a:?} membarrier={a2:?} shm={b:?} tcp={c:?}");
        drop((d, tcp));
    }
}
