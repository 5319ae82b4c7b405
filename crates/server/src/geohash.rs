//! Positions on the globe as Redis 7.0 keeps them in a sorted set (its geohash.c,
//! geohash_helper.c and geo.c), so that GEOADD stores the same scores, GEOPOS and GEODIST answer
//! the same digits and GEOSEARCH finds the same members in the same order.
//!
//! A position is a 52-bit score: the longitude in [-180, 180] and the latitude in Web Mercator's
//! [-85.05112878, 85.05112878] each cut into 2^26 equal steps, the two step numbers interleaved
//! (latitude bits at the even positions, longitude bits at the odd). Reading a score back gives
//! the middle of its cell. A search covers its shape with the cell (at a precision chosen from
//! the shape's size) that holds the centre and that cell's eight neighbours, reads each cell's
//! score range from the sorted set, and keeps the members whose distance (haversine on a sphere
//! of `EARTH_RADIUS_METERS`) puts them inside the shape.

use crate::long_double::{c_signed, TWO_TO_63};

/// Bits per coordinate in a stored score (Redis's GEO_STEP_MAX).
pub const STEP_MAX: u8 = 26;
pub const LONGITUDE_MIN: f64 = -180.0;
pub const LONGITUDE_MAX: f64 = 180.0;
/// Web Mercator's limits (EPSG:900913): Redis indexes no point nearer the poles.
pub const LATITUDE_MIN: f64 = -85.05112878;
pub const LATITUDE_MAX: f64 = 85.05112878;
/// Bits of a stored score (two coordinates of `STEP_MAX` bits).
const SCORE_BITS: u8 = 2 * STEP_MAX;
const EARTH_RADIUS_METERS: f64 = 6372797.560856;
/// Half the Web Mercator world's width: a search radius is doubled up to it to pick a precision.
const MERCATOR_MAX_METERS: f64 = 20037726.37;
const DEGREES_TO_RADIANS: f64 = std::f64::consts::PI / 180.0;
/// Latitudes from which a search uses one (then, from the second, two) precision steps fewer,
/// as cells narrow towards the poles.
const POLAR_LATITUDE_DEGREES: f64 = 66.0;
const NEAR_POLE_LATITUDE_DEGREES: f64 = 80.0;
/// The standard geohash (GEOHASH's reply): base 32, 11 characters of 5 bits, the last always
/// '0' (a stored position has 52 bits).
const GEOHASH_ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
const GEOHASH_CHARACTERS: usize = 11;
const GEOHASH_CHARACTER_BITS: u8 = 5;
const EVEN_BITS: u64 = 0x5555_5555_5555_5555;
const ODD_BITS: u64 = 0xaaaa_aaaa_aaaa_aaaa;

#[derive(Clone, Copy, Debug, PartialEq)]
struct Span {
    min: f64,
    max: f64,
}

const LONGITUDES: Span = Span { min: LONGITUDE_MIN, max: LONGITUDE_MAX };
const LATITUDES: Span = Span { min: LATITUDE_MIN, max: LATITUDE_MAX };
/// The standard geohash's latitudes (GEOHASH re-encodes a position over them).
const STANDARD_LATITUDES: Span = Span { min: -90.0, max: 90.0 };

/// A cell: the first `2 · step` bits of the scores of the positions inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cell {
    bits: u64,
    step: u8,
}

impl Cell {
    /// The scores of the positions in the cell: `min..max` (max excluded).
    fn score_range(self) -> (f64, f64) {
        let shift = SCORE_BITS - 2 * self.step;
        ((self.bits << shift) as f64, ((self.bits + 1) << shift) as f64)
    }

    /// The cell `columns` to the east (negative: west) and `rows` to the north, wrapping
    /// around at the edges as Redis's geohash_move_x and geohash_move_y do.
    fn moved(self, columns: i8, rows: i8) -> Cell {
        let bits = moved_bits(moved_bits(self.bits, self.step, ODD_BITS, columns), self.step, EVEN_BITS, rows);
        Cell { bits, step: self.step }
    }
}

/// Adds ±1 to the coordinate whose bits `mask` selects, the other's bits unchanged.
fn moved_bits(bits: u64, step: u8, mask: u64, direction: i8) -> u64 {
    if direction == 0 {
        return bits;
    }
    let unused_bits = 64 - 2 * u32::from(step);
    let (moving, kept) = (bits & mask, bits & !mask);
    // Ones in the other coordinate's places carry an addition across them.
    let filler = !mask >> unused_bits;
    let moved = if direction > 0 { moving.wrapping_add(filler + 1) } else { (moving | filler).wrapping_sub(filler + 1) };
    (moved & (mask >> unused_bits)) | kept
}

/// The area a cell covers.
#[derive(Clone, Copy, Debug)]
struct Area {
    longitude: Span,
    latitude: Span,
}

/// `even`'s low 32 bits at the even positions, `odd`'s at the odd ones.
fn interleave(even: u32, odd: u32) -> u64 {
    spread(even) | (spread(odd) << 1)
}

/// The even-position bits and the odd-position bits, each packed into 32 bits.
fn deinterleave(bits: u64) -> (u32, u32) {
    (packed(bits), packed(bits >> 1))
}

/// A 32-bit number's bits at the even positions of 64.
fn spread(value: u32) -> u64 {
    let mut bits = u64::from(value);
    bits = (bits | (bits << 16)) & 0x0000_ffff_0000_ffff;
    bits = (bits | (bits << 8)) & 0x00ff_00ff_00ff_00ff;
    bits = (bits | (bits << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    bits = (bits | (bits << 2)) & 0x3333_3333_3333_3333;
    (bits | (bits << 1)) & EVEN_BITS
}

/// The bits at the even positions of 64, packed: the inverse of `spread`.
fn packed(bits: u64) -> u32 {
    let mut bits = bits & EVEN_BITS;
    bits = (bits | (bits >> 1)) & 0x3333_3333_3333_3333;
    bits = (bits | (bits >> 2)) & 0x0f0f_0f0f_0f0f_0f0f;
    bits = (bits | (bits >> 4)) & 0x00ff_00ff_00ff_00ff;
    bits = (bits | (bits >> 8)) & 0x0000_ffff_0000_ffff;
    ((bits | (bits >> 16)) & 0xffff_ffff) as u32
}

/// Whether Redis can index a position (GEOADD's and the searches' check).
pub fn is_indexable(longitude: f64, latitude: f64) -> bool {
    (LONGITUDE_MIN..=LONGITUDE_MAX).contains(&longitude) && (LATITUDE_MIN..=LATITUDE_MAX).contains(&latitude)
}

/// The cell of `step` bits per coordinate over `longitudes` × `latitudes` holding a position;
/// None outside them or where Redis indexes nothing (geohashEncode).
fn cell_of(longitudes: Span, latitudes: Span, longitude: f64, latitude: f64, step: u8) -> Option<Cell> {
    assert!((1..=32).contains(&step), "a cell has 1 to 32 bits per coordinate");
    let inside = |span: Span, value: f64| (span.min..=span.max).contains(&value);
    if !is_indexable(longitude, latitude) || !inside(latitudes, latitude) || !inside(longitudes, longitude) {
        return None;
    }
    let cells = (1u64 << step) as f64;
    let latitude_offset = (latitude - latitudes.min) / (latitudes.max - latitudes.min) * cells;
    let longitude_offset = (longitude - longitudes.min) / (longitudes.max - longitudes.min) * cells;
    Some(Cell { bits: interleave(latitude_offset as u32, longitude_offset as u32), step })
}

/// The area of a cell over `longitudes` × `latitudes` (geohashDecode; a cell number past the
/// last, from a score that is no position, gives an area past the edge).
fn area_of(longitudes: Span, latitudes: Span, cell: Cell) -> Area {
    let (latitude_cell, longitude_cell) = deinterleave(cell.bits);
    let cells = (1u64 << cell.step) as f64;
    let span = |range: Span, number: u32| {
        let scale = range.max - range.min;
        Span { min: range.min + (f64::from(number) / cells) * scale, max: range.min + (f64::from(number.wrapping_add(1)) / cells) * scale }
    };
    Area { longitude: span(longitudes, longitude_cell), latitude: span(latitudes, latitude_cell) }
}

/// The score GEOADD stores for an indexable position.
pub fn score_of(longitude: f64, latitude: f64) -> u64 {
    let cell = cell_of(LONGITUDES, LATITUDES, longitude, latitude, STEP_MAX).expect("callers check is_indexable first");
    cell.bits
}

/// The bits C's `(uint64_t)` conversion of a score gives on x86-64 (gcc's sequence): below
/// 2^63 through a signed conversion (so -1 is all ones), from 2^63 on by subtracting 2^63
/// first; a signed conversion out of range (NaN too) is the "integer indefinite" 2^63.
fn score_bits(score: f64) -> u64 {
    if score >= TWO_TO_63 { (c_signed(score - TWO_TO_63) as u64) ^ (1 << 63) } else { c_signed(score) as u64 }
}



/// The position a score stands for: the middle of its cell, within the indexable limits
/// (Redis's decodeGeohash; any score decodes, a member added by ZADD too).
pub fn position_of(score: f64) -> (f64, f64) {
    let area = area_of(LONGITUDES, LATITUDES, Cell { bits: score_bits(score), step: STEP_MAX });
    let longitude = ((area.longitude.min + area.longitude.max) / 2.0).clamp(LONGITUDE_MIN, LONGITUDE_MAX);
    let latitude = ((area.latitude.min + area.latitude.max) / 2.0).clamp(LATITUDE_MIN, LATITUDE_MAX);
    (longitude, latitude)
}

/// The 11-character standard geohash of a stored position (GEOHASH): the position re-encoded
/// over latitudes ±90, as other geohash tools read it.
pub fn standard_geohash(score: f64) -> String {
    let (longitude, latitude) = position_of(score);
    let bits = cell_of(LONGITUDES, STANDARD_LATITUDES, longitude, latitude, STEP_MAX).map_or(0, |cell| cell.bits);
    (0..GEOHASH_CHARACTERS)
        .map(|at| {
            let consumed = (at as u8 + 1) * GEOHASH_CHARACTER_BITS;
            let index = if consumed > SCORE_BITS { 0 } else { (bits >> (SCORE_BITS - consumed)) & 0x1f };
            char::from(GEOHASH_ALPHABET[index as usize])
        })
        .collect()
}

fn radians(degrees: f64) -> f64 {
    degrees * DEGREES_TO_RADIANS
}

fn degrees(radians: f64) -> f64 {
    radians / DEGREES_TO_RADIANS
}

/// The distance in meters between two latitudes on one meridian.
fn latitude_distance(latitude_1: f64, latitude_2: f64) -> f64 {
    EARTH_RADIUS_METERS * (radians(latitude_2) - radians(latitude_1)).abs()
}

/// The great-circle distance in meters (haversine), computed in Redis's order of operations so
/// that GEODIST and WITHDIST print the same digits.
pub fn distance(longitude_1: f64, latitude_1: f64, longitude_2: f64, latitude_2: f64) -> f64 {
    let half_longitude_sine = ((radians(longitude_2) - radians(longitude_1)) / 2.0).sin();
    if half_longitude_sine == 0.0 {
        return latitude_distance(latitude_1, latitude_2);
    }
    let (latitude_1, latitude_2) = (radians(latitude_1), radians(latitude_2));
    let half_latitude_sine = ((latitude_2 - latitude_1) / 2.0).sin();
    let haversine = half_latitude_sine * half_latitude_sine + latitude_1.cos() * latitude_2.cos() * half_longitude_sine * half_longitude_sine;
    2.0 * EARTH_RADIUS_METERS * haversine.sqrt().asin()
}

/// A search's extent, in its unit.
#[derive(Clone, Copy, Debug)]
pub enum Extent {
    Radius(f64),
    Box { width: f64, height: f64 },
}

/// What a search covers: an extent around a centre, in a unit of `meters_per_unit` meters.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub longitude: f64,
    pub latitude: f64,
    pub extent: Extent,
    pub meters_per_unit: f64,
}

impl Shape {
    /// The distance in meters from the centre to a position inside the shape; None outside it,
    /// and None where rounding makes the haversine of a nearly antipodal pair NaN (Redis keeps
    /// such a point, with distance "nan").
    /// A box holds the positions whose latitude and longitude distances (the latter along the
    /// position's parallel) are each within half its height and width.
    pub fn distance_if_inside(&self, longitude: f64, latitude: f64) -> Option<f64> {
        match self.extent {
            Extent::Radius(radius) => {
                let meters = distance(self.longitude, self.latitude, longitude, latitude);
                (meters <= radius * self.meters_per_unit).then_some(meters)
            }
            Extent::Box { width, height } => {
                let (width, height) = (width * self.meters_per_unit, height * self.meters_per_unit);
                if latitude_distance(latitude, self.latitude) > height / 2.0 || distance(longitude, latitude, self.longitude, latitude) > width / 2.0 {
                    return None;
                }
                let meters = distance(self.longitude, self.latitude, longitude, latitude);
                (!meters.is_nan()).then_some(meters)
            }
        }
    }

    /// The score ranges (min included, max excluded) to read, in Redis's order: the centre's
    /// cell, then its neighbours north, south, east, west, north-east, north-west, south-east,
    /// south-west, without those that cannot hold a position inside the shape and without a
    /// cell equal to the last one read (huge radii make neighbours coincide).
    pub fn score_ranges(&self) -> Vec<(f64, f64)> {
        let mut ranges = Vec::with_capacity(NEIGHBOURHOOD_CELLS);
        let mut last: Option<Cell> = None;
        for cell in self.covering_cells().into_iter().flatten() {
            if last != Some(cell) {
                ranges.push(cell.score_range());
                last = Some(cell);
            }
        }
        ranges
    }

    /// The smallest longitude and latitude and the largest ones the shape reaches, with the
    /// longitude span taken at the edge nearer the pole (Redis's geohashBoundingBox).
    fn bounds(&self) -> Area {
        let (half_width, half_height) = match self.extent {
            Extent::Radius(radius) => (radius, radius),
            Extent::Box { width, height } => (width / 2.0, height / 2.0),
        };
        let (half_width, half_height) = (self.meters_per_unit * half_width, self.meters_per_unit * half_height);
        let latitude_delta = degrees(half_height / EARTH_RADIUS_METERS);
        let longitude_delta = |at_latitude: f64| degrees(half_width / EARTH_RADIUS_METERS / radians(at_latitude).cos());
        let polar_edge = if self.latitude < 0.0 { self.latitude - latitude_delta } else { self.latitude + latitude_delta };
        let longitude_delta = longitude_delta(polar_edge);
        Area {
            longitude: Span { min: self.longitude - longitude_delta, max: self.longitude + longitude_delta },
            latitude: Span { min: self.latitude - latitude_delta, max: self.latitude + latitude_delta },
        }
    }

    /// The radius in meters that the cells must cover: a box's half diagonal.
    fn reach_meters(&self) -> f64 {
        let reach = match self.extent {
            Extent::Radius(radius) => radius,
            Extent::Box { width, height } => ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt(),
        };
        reach * self.meters_per_unit
    }

    /// The centre's cell and its eight neighbours (None: not needed), at the precision Redis's
    /// geohashCalculateAreasByShapeWGS84 picks: from the reach, one step coarser when a
    /// neighbour would not reach the bounds.
    fn covering_cells(&self) -> [Option<Cell>; NEIGHBOURHOOD_CELLS] {
        let bounds = self.bounds();
        let mut step = estimated_step(self.reach_meters(), self.latitude);
        let mut centre = cell_of(LONGITUDES, LATITUDES, self.longitude, self.latitude, step).expect("a search's centre is indexable");
        let area = |cell: Cell| area_of(LONGITUDES, LATITUDES, cell);
        let too_fine = area(centre.moved(0, 1)).latitude.max < bounds.latitude.max
            || area(centre.moved(0, -1)).latitude.min > bounds.latitude.min
            || area(centre.moved(1, 0)).longitude.max < bounds.longitude.max
            || area(centre.moved(-1, 0)).longitude.min > bounds.longitude.min;
        if step > 1 && too_fine {
            step -= 1;
            centre = cell_of(LONGITUDES, LATITUDES, self.longitude, self.latitude, step).expect("a search's centre is indexable");
        }
        let centre_area = area(centre);
        // A neighbour beyond an edge the shape does not reach is not read.
        let useful = |columns: i8, rows: i8| {
            step < 2
                || !((rows < 0 && centre_area.latitude.min < bounds.latitude.min)
                    || (rows > 0 && centre_area.latitude.max > bounds.latitude.max)
                    || (columns < 0 && centre_area.longitude.min < bounds.longitude.min)
                    || (columns > 0 && centre_area.longitude.max > bounds.longitude.max))
        };
        NEIGHBOURHOOD.map(|(columns, rows)| useful(columns, rows).then(|| centre.moved(columns, rows)))
    }
}

const NEIGHBOURHOOD_CELLS: usize = 9;
/// (columns east, rows north) of the cells a search reads, in Redis's order.
const NEIGHBOURHOOD: [(i8, i8); NEIGHBOURHOOD_CELLS] = [(0, 0), (0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (-1, 1), (1, -1), (-1, -1)];

/// Redis's geohashEstimateStepsByRadius: the bits per coordinate of cells about as large as the
/// radius, fewer near the poles, from 1 to `STEP_MAX`.
fn estimated_step(radius_meters: f64, latitude: f64) -> u8 {
    if radius_meters == 0.0 {
        return STEP_MAX;
    }
    let mut step: i32 = 1;
    let mut reach = radius_meters;
    while reach < MERCATOR_MAX_METERS {
        reach *= 2.0;
        step += 1;
    }
    step -= 2;
    if latitude.abs() > POLAR_LATITUDE_DEGREES {
        step -= 1;
        if latitude.abs() > NEAR_POLE_LATITUDE_DEGREES {
            step -= 1;
        }
    }
    step.clamp(1, i32::from(STEP_MAX)) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaving_round_trips() {
        for (even, odd) in [(0, 0), (1, 0), (0, 1), (0x3ff_ffff, 0x155_5555), (u32::MAX, 0), (0x1234_5678, u32::MAX)] {
            assert_eq!(deinterleave(interleave(even, odd)), (even, odd));
        }
        assert_eq!(interleave(1, 0), 1);
        assert_eq!(interleave(0, 1), 2);
    }

    #[test]
    fn positions_encode_and_decode_as_redis_stores_them() {
        // Redis 7.0: GEOADD Sicily 13.361389 38.115556 "Palermo"; ZSCORE → 3479099956230698.
        assert_eq!(score_of(13.361389, 38.115556), 3479099956230698);
        let (longitude, latitude) = position_of(3479099956230698.0);
        assert_eq!(format!("{longitude:.17} {latitude:.17}"), "13.36138933897018433 38.11555639549629859");
        assert_eq!(standard_geohash(3479099956230698.0), "sqc8b49rny0");
        assert!(!is_indexable(180.1, 0.0) && !is_indexable(0.0, 85.06) && is_indexable(-180.0, LATITUDE_MIN));
        // Any score decodes to a position within the limits.
        for score in [-1.0, f64::NAN, 1e300, 4503599627370496.0, 9007199254740991.0] {
            let (longitude, latitude) = position_of(score);
            assert!(is_indexable(longitude, latitude), "{score}");
        }
    }

    #[test]
    fn distances_are_haversine_on_redis_earth() {
        // Redis 7.0: GEODIST Sicily Palermo Catania → "166274.1516".
        let (palermo, catania) = (position_of(3479099956230698.0), position_of(3479447370796909.0));
        assert_eq!(format!("{:.4}", distance(palermo.0, palermo.1, catania.0, catania.1)), "166274.1516");
        assert_eq!(distance(10.0, 20.0, 10.0, 21.0), latitude_distance(20.0, 21.0));
    }

    #[test]
    fn neighbours_wrap_around_the_grid() {
        let cell = Cell { bits: 0, step: 2 };
        assert_eq!(cell.moved(-1, 0), Cell { bits: interleave(0, 3), step: 2 });
        assert_eq!(cell.moved(0, -1), Cell { bits: interleave(3, 0), step: 2 });
        assert_eq!(cell.moved(1, 1).moved(-1, -1), cell);
        let corner = Cell { bits: interleave(3, 3), step: 2 };
        assert_eq!(corner.moved(1, 1), Cell { bits: 0, step: 2 });
    }

    #[test]
    fn searches_read_the_centre_cell_and_the_neighbours_they_need() {
        let shape = |radius: f64| Shape { longitude: 15.0, latitude: 37.0, extent: Extent::Radius(radius), meters_per_unit: 1000.0 };
        let ranges = shape(200.0).score_ranges();
        assert!(!ranges.is_empty() && ranges.len() <= NEIGHBOURHOOD_CELLS);
        let centre = score_of(15.0, 37.0) as f64;
        assert!(ranges[0].0 <= centre && centre < ranges[0].1, "the centre's cell comes first");
        // The whole world: four distinct cells of one bit per coordinate.
        assert_eq!(shape(50_000.0).score_ranges().len(), 4);
        assert_eq!(estimated_step(0.0, 0.0), STEP_MAX);
        assert_eq!(estimated_step(1.0, 89.0), 22);
        let inside = shape(200.0);
        assert!(inside.distance_if_inside(15.0, 37.0).is_some() && inside.distance_if_inside(15.0, 40.0).is_none());
        let square = Shape { extent: Extent::Box { width: 200.0, height: 200.0 }, ..inside };
        assert!(square.distance_if_inside(16.0, 37.0).is_some() && square.distance_if_inside(15.0, 38.0).is_none());
    }
}
