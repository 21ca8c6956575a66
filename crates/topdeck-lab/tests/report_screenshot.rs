// SPDX-License-Identifier: Apache-2.0
//! The report as a person sees it: a real contend run's page, rendered by
//! headless Chromium, checked on the screenshot's pixels (the header band,
//! a bar of the chart in the section's colour, a page that is not blank).
//! Without Chromium the test says so and is skipped, except in CI (`CI`
//! set), where a missing browser fails it: `scripts/deps.sh` installs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The window, and so the screenshot, in pixels.
const WIDTH: u32 = 1280;
const HEIGHT: u32 = 2000;
/// The header band's background (`page::STYLE`).
const HEADER: [u8; 3] = [31, 41, 55];
/// The first series' bar colour (`chart::COLORS[0]`).
const FIRST_SERIES: [u8; 3] = [31, 119, 180];

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file())
}

/// An RGB screenshot: width, height and 3 bytes per pixel.
struct Shot {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
}

impl Shot {
    fn read(path: &Path) -> Self {
        let mut decoder = png::Decoder::new(std::fs::File::open(path).unwrap());
        decoder.set_transformations(png::Transformations::normalize_to_color8());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let channels = info.color_type.samples();
        assert!(
            channels >= 3,
            "not a colour screenshot: {:?}",
            info.color_type
        );
        let rgb = buf[..info.buffer_size()]
            .chunks(channels)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect();
        Self {
            width: info.width,
            height: info.height,
            rgb,
        }
    }

    fn at(&self, x: u32, y: u32) -> [u8; 3] {
        let i = ((y * self.width + x) * 3) as usize;
        [self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]]
    }

    /// The longest vertical run of `color` in columns `xs`, below row `y0`:
    /// (its length, its column, its top row).
    fn tallest_run(&self, color: [u8; 3], xs: std::ops::Range<u32>, y0: u32) -> (u32, u32, u32) {
        let mut best = (0, 0, 0);
        for x in xs {
            let mut run = 0;
            for y in y0..self.height {
                if self.at(x, y) == color {
                    run += 1;
                    if run > best.0 {
                        best = (run, x, y + 1 - run);
                    }
                } else {
                    run = 0;
                }
            }
        }
        best
    }
}

/// Runs chromium on `page`, writing `png`; fails after a minute.
fn screenshot(chromium: &Path, page: &Path, png: &Path, profile: &Path) {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("--window-size={WIDTH},{HEIGHT}"))
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium took over a minute to take the screenshot");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    assert!(
        status.success() && png.exists(),
        "chromium failed ({status}):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_report_renders_in_a_browser_with_its_header_table_and_bars() {
    let Some(chromium) = chromium() else {
        if std::env::var_os("CI").is_some() {
            panic!("chromium is not installed, and CI must render the report: scripts/deps.sh installs it (apt-get install chromium)");
        }
        eprintln!("SKIPPED: chromium is not installed, so the report was not rendered; install it (apt-get install chromium) to run this test");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lab");
    let o = Command::new(env!("CARGO_BIN_EXE_topdeck-lab"))
        .args(["--quick", "--out"])
        .arg(&out)
        .args(["contend", "--", "true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let png = dir.path().join("report.png");
    screenshot(
        &chromium,
        &out.join("report.html"),
        &png,
        &dir.path().join("profile"),
    );
    if let Some(keep) = std::env::var_os("TOPDECK_LAB_SCREENSHOT") {
        // For a person to look at: TOPDECK_LAB_SCREENSHOT=/tmp/lab-report.png.
        std::fs::copy(&png, keep).unwrap();
    }

    let shot = Shot::read(&png);
    assert_eq!((shot.width, shot.height), (WIDTH, HEIGHT));
    // The header band runs across the top of the page.
    for x in [5, WIDTH / 2, WIDTH - 5] {
        assert_eq!(shot.at(x, 5), HEADER, "header at ({x}, 5)");
    }
    let header_end = (0..HEIGHT)
        .find(|&y| shot.at(5, y) != HEADER)
        .expect("the header ends");
    assert!(
        (60..300).contains(&header_end),
        "header {header_end} px tall"
    );

    // The contend chart is the first in its grid, so its bars are in the
    // left half, below the header; the tallest (8 at once, wall) spans most
    // of a 300 px chart, not a legend swatch's few pixels.
    let (run, x, top) = shot.tallest_run(FIRST_SERIES, 0..WIDTH / 2, header_end);
    assert!(
        run >= 100,
        "tallest bar {run} px at ({x}, {top}): no bar chart drawn"
    );
    assert!(
        shot.tallest_run(FIRST_SERIES, WIDTH / 2..WIDTH, header_end)
            .0
            < 20,
        "a bar in the right half, where no chart is"
    );

    // Not blank: many colours (text, table stripes, bars) over the page.
    let mut colours: Vec<[u8; 3]> = shot.rgb.chunks(3).map(|p| [p[0], p[1], p[2]]).collect();
    colours.sort_unstable();
    colours.dedup();
    assert!(
        colours.len() > 100,
        "{} colours: a blank page",
        colours.len()
    );
}
