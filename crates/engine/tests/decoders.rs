//! The fuzz targets' entry points on seeded random and mutated input, so that every test run
//! exercises each decoder of media bytes a little (the long runs are `cargo fuzz run`).

use hybridkv_engine::fuzzing;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CASES: usize = 3000;

fn random_bytes(rng: &mut StdRng, max_len: usize) -> Vec<u8> {
    let len = rng.gen_range(0..max_len);
    (0..len).map(|_| if rng.gen_bool(0.3) { 0 } else { rng.gen() }).collect()
}

/// A valid database's media, then mutated: decoders see both plausible and hostile bytes.
fn valid_media() -> (Vec<u8>, Vec<u8>) {
    use hybridkv_engine::{Config, Database, Durability, NamespaceConfig, Tier, KIB, MIB};
    use hybridkv_media::sim::SimStore;
    use hybridkv_media::MediaProvider;
    let store = SimStore::new(1);
    let mut namespace = NamespaceConfig::new("fuzz");
    namespace.index = Tier::Pmem;
    namespace.data = Tier::Pmem;
    namespace.durability = Durability::Always;
    namespace.index_bytes = 4 * MIB;
    namespace.data_bytes = 4 * MIB;
    namespace.write_block_bytes = 64 * KIB;
    namespace.checkpoint_interval_bytes = 64 * KIB;
    namespace.value_bytes_max = 1024;
    let config = Config {
        data_dir: "/sim".into(),
        shmem_dir: "/sim".into(),
        direct_io: false,
        background_maintenance: false,
        databases: 1,
        namespaces: vec![namespace],
    };
    let database = Database::open_with(config, std::sync::Arc::new(store.clone())).unwrap();
    for number in 0..200u32 {
        database.namespace(0).unwrap().put(&number.to_le_bytes(), &[number as u8; 40], 0).unwrap();
    }
    database.close().unwrap();
    let read = |name: &str, len: usize| {
        let medium = store.open(name, Tier::Pmem, 4 * MIB).unwrap().medium;
        let mut bytes = vec![0u8; len];
        medium.read_at(0, &mut bytes).unwrap();
        bytes
    };
    (read("fuzz.data", 16 * 1024), read("fuzz.index", 80 * 1024))
}

fn mutate(rng: &mut StdRng, bytes: &[u8]) -> Vec<u8> {
    let mut mutated = bytes.to_vec();
    for _ in 0..rng.gen_range(1..8) {
        let position = rng.gen_range(0..mutated.len());
        mutated[position] = rng.gen();
    }
    mutated
}

#[test]
fn decoders_accept_or_reject_arbitrary_bytes_without_panicking() {
    let mut rng = StdRng::seed_from_u64(7);
    let (data, index) = valid_media();
    fuzzing::records(&data[64..]);
    fuzzing::index_region(&index);
    for _ in 0..CASES {
        fuzzing::records(&random_bytes(&mut rng, 4096));
        fuzzing::records(&mutate(&mut rng, &data[64..]));
        fuzzing::journal(&random_bytes(&mut rng, 4096));
        let text: String = random_bytes(&mut rng, 200).into_iter().map(|byte| (byte % 96 + 32) as char).collect();
        fuzzing::config(&text);
    }
    for _ in 0..CASES / 30 {
        fuzzing::index_region(&mutate(&mut rng, &index));
    }
}

#[test]
fn fuzz_findings_stay_fixed() {
    // engine_records: a record whose padding ran past the end of the image made the walk end
    // beyond the image.
    let record_padded_past_the_end: [u8; 62] = [
        0x00, 0x00, 0x00, 0x00, 0x00, 0x81, 0x67, 0x20, 0x5d, 0x67, 0x2a, 0x8f, 0x00, 0x00, 0x00, 0x00,
        0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x17, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x38, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x31, 0x07, 0x00, 0x00, 0xff, 0x00, 0xff, 0xf8, 0xff,
    ];
    fuzzing::records(&record_padded_past_the_end);
}
