//! Reading a master ↔ daemon link (`spec/runtime.md`, LINK-1): a thread per link turns
//! the TCP stream into whole frames for the engine, which decodes them; the link's end
//! (closed, failed, or a frame that does not split) is reported once.

use std::net::TcpStream;
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use super::engine::Event;
use dynres_client::framing::{Frame, FrameReader};

/// Reads frames off `stream` (after what `frames` holds already) until it ends, each as [`Event::NodeFrame`], then one
/// [`Event::NodeGone`]. `node` names the peer (the master's own node on a daemon).
pub fn reader(
    mut stream: TcpStream,
    mut frames: FrameReader,
    node: u32,
    events: Sender<Event>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("dynres-link-{node}"))
        .spawn(move || {
            let why = loop {
                match frames.next(&mut stream) {
                    Ok(Ok(Frame::Frame(frame))) => {
                        if events.send(Event::NodeFrame { node, frame }).is_err() {
                            return;
                        }
                    }
                    Ok(Ok(Frame::Closed)) => break "the link closed".to_string(),
                    Ok(Err(e)) => break format!("malformed frame on the link: {e}"),
                    Err(e) => break format!("the link failed: {e}"),
                }
            };
            let _ = events.send(Event::NodeGone { node, why });
        })
}
