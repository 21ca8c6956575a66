// SPDX-License-Identifier: Apache-2.0
//! Giving memory back after a burst of cgroups: the agent's maps grow to
//! the most cgroups it ever tracked at once, and a host that starts and
//! stops a few thousand containers in a minute would otherwise keep the
//! agent at that size for good.

use std::collections::HashMap;
use std::hash::Hash;

/// Shrinks `map` when three quarters of its room are unused.
pub(crate) fn give_back<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

/// Returns the allocator's free pages to the system: after a burst, freed
/// names and map tables are scattered through the heap, below its top,
/// where freeing alone does not return them.
pub(crate) fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_emptied_after_a_burst_shrinks_and_a_busy_one_does_not() {
        let mut m: HashMap<u64, String> = (0..4096).map(|i| (i, i.to_string())).collect();
        let burst = m.capacity();
        give_back(&mut m);
        assert_eq!(m.capacity(), burst, "in use: kept");
        m.retain(|k, _| *k < 10);
        give_back(&mut m);
        assert!(m.capacity() < burst / 16, "{} of {burst}", m.capacity());
        assert_eq!(m.len(), 10);
    }
}
