//! One node's daemon IPC: length-prefixed frames on a unix socket, as pilotctl 1.18.0 speaks
//! them. Only the commands that `info`, `publish`, `subscribe` and the trust commands
//! (`handshake`, `approve`, `reject`, `pending`, `trust`, `untrust`) use are served; anything
//! else gets an error frame so the CLI fails loudly instead of hanging.

use std::sync::Arc;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use crate::net::{
    ipc_frame, ClientTx, DialError, Net, Outbound, SendError, TrustError, CLIENT_QUEUE,
};

use pilot_election::transport::pilot::daemon::command::{
    CMD_CLOSE, CMD_DIAL, CMD_DIAL_OK, CMD_ERROR, CMD_INFO, CMD_INFO_OK, CMD_RESOLVE,
    CMD_RESOLVE_OK, CMD_SEND, CMD_TRUST, CMD_TRUST_OK, TRUST_CHECK,
};

/// The first payload byte of a trust request, as pilotctl 1.18.0 sends it (found by capturing
/// its frames); the node id that follows is a u32 BE, then any free text.
const TRUST_HANDSHAKE: u8 = 1;
const TRUST_APPROVE: u8 = 2;
const TRUST_REJECT: u8 = 3;
const TRUST_PENDING: u8 = 4;
const TRUST_LIST: u8 = 5;
const TRUST_UNTRUST: u8 = 6;
/// "Is this peer trusted (waiting up to N ms)?": pilotctl asks before `publish` and `subscribe`
/// dial; on `false` it would go on to ask the registry whether the peer is public, which the
/// devnet does not emulate.
const TRUST_WAIT: u8 = TRUST_CHECK;

/// pilotctl refuses frames over 64 MiB; a larger length from a client means a broken stream.
const MAX_FRAME: usize = 64 * 1024 * 1024;

pub async fn serve_node(net: Arc<Net>, node: usize, listener: UnixListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve_client(net.clone(), node, stream));
            }
            Err(e) => {
                eprintln!("pilot-devnet: accept on {}: {e}", net.nodes[node].name);
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// Writes queued frames in order, each no earlier than its release instant: a constant delay
/// then keeps per-connection order, as the real broker does.
async fn write_loop(mut writer: OwnedWriteHalf, mut rx: mpsc::Receiver<Outbound>) {
    while let Some(out) = rx.recv().await {
        pilot_election::clock::sleep_until(out.at).await;
        if writer.write_all(&out.frame).await.is_err() {
            return;
        }
    }
}

fn reply(tx: &ClientTx, cmd: u8, payload: &[u8]) {
    let _ = tx.try_send(Outbound {
        at: pilot_election::clock::now(),
        frame: ipc_frame(cmd, payload),
    });
}

fn reply_error(tx: &ClientTx, code: u16, text: &str) {
    let mut payload = code.to_be_bytes().to_vec();
    payload.extend_from_slice(text.as_bytes());
    reply(tx, CMD_ERROR, &payload);
}

async fn serve_client(net: Arc<Net>, node: usize, stream: UnixStream) {
    let client = net.new_client();
    let (mut reader, writer) = stream.into_split();
    let (tx, rx) = mpsc::channel(CLIENT_QUEUE);
    let writer_task = tokio::spawn(write_loop(writer, rx));
    loop {
        let mut len = [0u8; 4];
        if reader.read_exact(&mut len).await.is_err() {
            break;
        }
        let len = u32::from_be_bytes(len) as usize;
        if len == 0 || len > MAX_FRAME {
            break;
        }
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).await.is_err() {
            break;
        }
        // A stalled daemon reads but never answers: the way to make pilotctl hang for tests.
        if net.is_stalled(node) {
            continue;
        }
        handle(&net, node, client, &tx, body[0], &body[1..]);
    }
    net.client_gone(client);
    drop(tx);
    let _ = writer_task.await;
}

fn handle(net: &Net, node: usize, client: u64, tx: &ClientTx, cmd: u8, payload: &[u8]) {
    let me = &net.nodes[node];
    match cmd {
        CMD_INFO => {
            let info = serde_json::json!({
                "node_id": me.node_id,
                "address": me.address,
                "hostname": me.hostname,
                "version": net.daemon_version,
                "emulated": true,
            });
            reply(tx, CMD_INFO_OK, info.to_string().as_bytes());
        }
        CMD_RESOLVE => {
            let name = String::from_utf8_lossy(payload);
            match net.nodes.iter().find(|n| n.hostname == name) {
                Some(n) => {
                    let found = serde_json::json!({"node_id": n.node_id, "address": n.address});
                    reply(tx, CMD_RESOLVE_OK, found.to_string().as_bytes());
                }
                None => reply_error(tx, 2, &format!("hostname {name:?} not found")),
            }
        }
        CMD_TRUST => match trust(net, node, payload) {
            Ok(answer) => reply(tx, CMD_TRUST_OK, answer.to_string().as_bytes()),
            Err(text) => reply_error(tx, 1, &text),
        },
        CMD_DIAL => {
            if payload.len() < 8 {
                return reply_error(tx, 1, "malformed dial");
            }
            let network = u16::from_be_bytes([payload[0], payload[1]]);
            let node_id = u32::from_be_bytes([payload[2], payload[3], payload[4], payload[5]]);
            let port = u16::from_be_bytes([payload[6], payload[7]]);
            if network != 0 {
                return reply_error(tx, 3, "no route to network");
            }
            match net.dial(client, node, node_id, port, tx) {
                Ok(conn) => reply(tx, CMD_DIAL_OK, &conn.to_be_bytes()),
                Err(DialError::NoSuchNode) => reply_error(tx, 3, "no such node"),
                Err(DialError::PortClosed) => reply_error(tx, 4, "connection refused"),
                Err(DialError::Unreachable) => reply_error(tx, 5, "dial timeout: peer unreachable"),
            }
        }
        CMD_SEND => {
            let Some(conn) = conn_id(payload) else {
                return reply_error(tx, 1, "malformed send");
            };
            if let Err(SendError::UnknownConnection) = net.send(client, conn, &payload[4..]) {
                reply_error(tx, 6, "connection not found");
            }
        }
        CMD_CLOSE => {
            if let Some(conn) = conn_id(payload) {
                net.close(client, conn);
            }
        }
        other => reply_error(
            tx,
            1,
            &format!("pilot-devnet does not emulate command 0x{other:02X}"),
        ),
    }
}

/// One trust request: a sub-operation byte, then (for most) the other node's id and free text.
/// The answers are what `pilotctl --json` prints as `.data`.
fn trust(net: &Net, node: usize, payload: &[u8]) -> Result<serde_json::Value, String> {
    use serde_json::json;
    let op = payload.first().copied().unwrap_or(0);
    let other = conn_id(payload.get(1..).unwrap_or_default());
    let text = String::from_utf8_lossy(payload.get(5..).unwrap_or_default()).into_owned();
    let need = || other.ok_or_else(|| "malformed trust request: no node id".to_string());
    let failed = |e: TrustError, id: u32| match e {
        TrustError::NoSuchNode => format!("node {id} not found"),
        TrustError::NoPendingRequest => format!("no pending handshake request from node {id}"),
    };
    match op {
        TRUST_HANDSHAKE => {
            let id = need()?;
            let trusted = net.handshake(node, id, text).map_err(|e| failed(e, id))?;
            Ok(json!({"node_id": id, "trusted": trusted, "pending": !trusted}))
        }
        TRUST_APPROVE => {
            let id = need()?;
            net.approve(node, id).map_err(|e| failed(e, id))?;
            Ok(json!({"node_id": id, "trusted": true}))
        }
        TRUST_REJECT => {
            let id = need()?;
            net.reject(node, id).map_err(|e| failed(e, id))?;
            Ok(json!({"node_id": id, "rejected": true}))
        }
        TRUST_UNTRUST => {
            let id = need()?;
            net.untrust(node, id).map_err(|e| failed(e, id))?;
            Ok(json!({"node_id": id}))
        }
        TRUST_WAIT => {
            let id = need()?;
            let trusted = net.trusts_id(node, id).map_err(|e| failed(e, id))?;
            Ok(json!({"node_id": id, "trusted": trusted}))
        }
        TRUST_PENDING => Ok(json!({"pending": net.pending_for(node)})),
        TRUST_LIST => {
            let trusted = net.trusted_by(node);
            Ok(json!({"total": trusted.len(), "trusted": trusted}))
        }
        other => Err(format!(
            "pilot-devnet does not emulate trust operation {other}"
        )),
    }
}

fn conn_id(payload: &[u8]) -> Option<u32> {
    payload
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}
