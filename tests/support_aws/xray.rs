//! The stand-in X-Ray daemon the functions send their segments to.

use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

/// A stand-in X-Ray daemon on 127.0.0.1: its address, what it received, and its task.
pub(super) async fn xray_daemon() -> (String, Arc<Mutex<Vec<String>>>, JoinHandle<()>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap().to_string();
    let received = Arc::new(Mutex::new(Vec::new()));
    let sink = received.clone();
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok(n) = socket.recv(&mut buf).await {
            sink.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    });
    (addr, received, task)
}
