//! The netlink batch encoder: any transaction the bytes describe (every
//! operation kind, element lists of any length, names up to any length)
//! encodes into a batch whose every length is what follows it, or is
//! refused as unencodable; never a corrupt batch, never a panic.

#![no_main]

use std::net::{Ipv4Addr, SocketAddr};

use libfuzzer_sys::fuzz_target;
use linux_dataplane::wire;
use nft_dataplane::element::{Element, Key, Value};
use nft_dataplane::names::{ChainId, SetId};
use nft_dataplane::rule::{Match, Rule, Statement};
use nft_dataplane::{Op, Transaction};
use slice_model::{IpFamily, Protocol};

/// Reads the fuzzer's bytes as numbers.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*first)
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8()?, self.u8()?]))
    }
}

fn name(len: u16) -> String {
    "n".repeat(usize::from(len))
}

fn op(b: &mut Bytes<'_>) -> Option<Op> {
    let kind = b.u8()? % 8;
    let count = usize::from(b.u16()? % 12_000);
    let long = b.u16()? % 400;
    let chain = ChainId::Svc(format!("ns/{}/tcp/80", name(long)));
    let set = SetId::Backends(Protocol::Tcp, name(long));
    let elements = || {
        (0..count)
            .map(|i| {
                Element::map(
                    Key::Index(i as u32),
                    Value::Endpoint(SocketAddr::from(([10, 0, 0, 1], 80))),
                )
            })
            .collect()
    };
    Some(match kind {
        0 => Op::AddElements(set, elements()),
        1 => Op::DeleteElements(set, elements()),
        2 => Op::FlushSet(set),
        3 => Op::AddChain(chain),
        4 => Op::AddElements(
            SetId::Picks(name(long)),
            (0..count)
                .map(|i| {
                    let chain = ChainId::Endpoint(format!("{}/{i}", name(long)));
                    Element::map(Key::Index(i as u32), Value::Goto(chain))
                })
                .collect(),
        ),
        5 => {
            let nets = (0..count as u32)
                .map(|i| ipnet::IpNet::new(Ipv4Addr::from(i << 9).into(), 24).unwrap_or_default())
                .collect();
            Op::AddRule(chain, Rule::new(vec![Match::SourceIn(nets)], vec![Statement::Drop]))
        }
        6 => {
            let clients = SetId::Clients(name(long));
            let endpoint = SocketAddr::from(([10, 0, 0, 1], count as u16));
            Op::AddRule(
                chain,
                Rule::new(
                    vec![Match::KnownClient {
                        clients: clients.clone(),
                        endpoint,
                    }],
                    vec![
                        Statement::RememberClient {
                            clients,
                            endpoint,
                            timeout_secs: count as u64,
                        },
                        Statement::RandomChain {
                            map: SetId::Picks(name(long)),
                            width: count as u32,
                        },
                    ],
                ),
            )
        }
        _ => Op::DeleteChain(chain),
    })
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let family = if b.u8().unwrap_or(0) % 2 == 0 {
        IpFamily::V4
    } else {
        IpFamily::V6
    };
    let mut tx = Transaction::new(family);
    while let Some(o) = op(&mut b) {
        tx.push(o);
    }
    match wire::encode(&tx) {
        Ok(Some(bytes)) => {
            if let Err(e) = wire::check_lengths(&bytes) {
                panic!("a corrupt batch: {e}");
            }
            // A refusal of any of its attributes, and an error reply of
            // the input's bytes, are read without a panic.
            let byte = |i: usize| data.get(i).copied().unwrap_or(0);
            let offset = u32::from(u16::from_le_bytes([byte(0), byte(1)]));
            let flags = u16::from(byte(2)) << 8;
            wire::read_refusals(&bytes, offset, flags, data);
        }
        Ok(None) | Err(_) => {}
    }
});
