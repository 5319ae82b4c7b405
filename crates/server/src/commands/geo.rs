//! GEO commands: GEOADD GEOPOS GEODIST GEOHASH GEOSEARCH GEOSEARCHSTORE and the older GEORADIUS
//! GEORADIUS_RO GEORADIUSBYMEMBER GEORADIUSBYMEMBER_RO, over sorted sets whose scores are
//! positions (`crate::geohash`), with Redis 7.0's replies, errors (checked in its order) and
//! events. A search reads only the score ranges of the cells around its centre, each found by
//! binary search in a bucketed set's order index.

use bytes::Bytes;
use hybridkv_resp::Reply;

use super::sorted_sets::{add_scored, members_scored_from_up_to, open, parse_add_options, parse_score_or_reply, score_of, store_members, GEOADD_OPTIONS};
use super::{is, parse_integer, NOT_FLOAT, SYNTAX_ERROR};
use crate::command::{fail, Call, CommandError, CommandResult};
use crate::geohash::{self, Extent, Shape};
use crate::long_double::{c_signed, LongDouble};
use crate::sorted_set_layout::{OpenSortedSet, Scored};

const UNKNOWN_MEMBER: &str = "ERR could not decode requested zset member";
/// The units a distance may be given in, and their meters.
const UNITS: [(&str, f64); 4] = [("m", 1.0), ("km", 1000.0), ("ft", 0.3048), ("mi", 1609.34)];

/// A longitude and a latitude as Redis's extractLongLatOrReply reads them: floats, then within
/// the indexable limits.
fn parse_position(longitude: &[u8], latitude: &[u8]) -> Result<(f64, f64), CommandError> {
    let (longitude, latitude) = (parse_score_or_reply(longitude, NOT_FLOAT)?, parse_score_or_reply(latitude, NOT_FLOAT)?);
    if !geohash::is_indexable(longitude, latitude) {
        return fail(format!("ERR invalid longitude,latitude pair {longitude:.6},{latitude:.6}"));
    }
    Ok((longitude, latitude))
}

/// A unit's meters (any case).
fn parse_unit(text: &[u8]) -> Result<f64, CommandError> {
    match UNITS.iter().find(|(name, _)| is(text, name)) {
        Some(&(_, meters)) => Ok(meters),
        None => fail("ERR unsupported unit provided. please use M, KM, FT, MI"),
    }
}

/// BYRADIUS's (and GEORADIUS's) radius and unit: the extent and its unit's meters.
fn parse_radius(radius: &[u8], unit: &[u8]) -> Result<(Extent, f64), CommandError> {
    let radius = parse_score_or_reply(radius, "ERR need numeric radius")?;
    if radius < 0.0 {
        return fail("ERR radius cannot be negative");
    }
    Ok((Extent::Radius(radius), parse_unit(unit)?))
}

/// BYBOX's width, height and unit.
fn parse_box(width: &[u8], height: &[u8], unit: &[u8]) -> Result<(Extent, f64), CommandError> {
    let width = parse_score_or_reply(width, "ERR need numeric width")?;
    let height = parse_score_or_reply(height, "ERR need numeric height")?;
    if height < 0.0 || width < 0.0 {
        return fail("ERR height or width cannot be negative");
    }
    Ok((Extent::Box { width, height }, parse_unit(unit)?))
}

/// A coordinate as Redis writes it (`%.17Lf` of the double, trailing zeros removed).
fn coordinate_reply(value: f64) -> Reply {
    Reply::DoubleText(LongDouble::from_f64(value).to_redis_text())
}

fn position_reply((longitude, latitude): (f64, f64)) -> Reply {
    Reply::Array(vec![coordinate_reply(longitude), coordinate_reply(latitude)])
}

/// Decimals of a distance in a reply.
const DISTANCE_DECIMALS: u32 = 4;

/// A distance as Redis 7.0 writes it (fixedpoint_d2string): the distance times 10^4 rounded to
/// an integer as llrint rounds (ties to even, so 0.00005 is "0.0000" and not what `%.4f` of
/// the exact value would print), then written with four decimals; a bulk string in RESP3 too.
fn distance_reply(distance: f64) -> Reply {
    let scaled = c_signed((distance * f64::from(10u32.pow(DISTANCE_DECIMALS))).round_ties_even());
    let unit = 10u64.pow(DISTANCE_DECIMALS);
    let sign = if scaled < 0 { "-" } else { "" };
    let magnitude = scaled.unsigned_abs();
    Reply::bulk(format!("{sign}{}.{:0width$}", magnitude / unit, magnitude % unit, width = DISTANCE_DECIMALS as usize))
}

/// GEOADD key [NX|XX] [CH] longitude latitude member [...]: ZADD of the members at their
/// positions' scores (every position checked before the key's type), event `zadd`.
pub fn geoadd(call: &mut Call<'_>) -> CommandResult {
    let args = call.args;
    let (options, at) = parse_add_options(args, GEOADD_OPTIONS);
    let triples = &args[at..];
    if triples.is_empty() || !triples.len().is_multiple_of(3) || (options.only_new && options.only_existing) {
        return fail(SYNTAX_ERROR);
    }
    let members = triples
        .chunks(3)
        .map(|triple| {
            let (longitude, latitude) = parse_position(&triple[0], &triple[1])?;
            Ok((triple[2].clone(), geohash::score_of(longitude, latitude) as f64))
        })
        .collect::<Result<Vec<Scored>, CommandError>>()?;
    add_scored(call, &options, members)
}

/// One reply per member after the key: `present` of its score, `missing` when the key or the
/// member is (GEOPOS, GEOHASH).
fn per_member(call: &mut Call<'_>, present: fn(f64) -> Reply, missing: fn() -> Reply) -> CommandResult {
    let key = call.args[1].clone();
    let mut set = open(call, &key)?;
    let args = call.args;
    let mut replies = Vec::with_capacity(args.len() - 2);
    for member in &args[2..] {
        replies.push(score_of(call, &mut set, member)?.map_or_else(missing, present));
    }
    Ok(Reply::Array(replies))
}

/// GEOPOS key [member ...]: each member's [longitude, latitude], nil for a missing one.
pub fn geopos(call: &mut Call<'_>) -> CommandResult {
    per_member(call, |score| position_reply(geohash::position_of(score)), || Reply::NullArray)
}

/// GEOHASH key [member ...]: each member's 11-character standard geohash, nil for a missing one.
pub fn geohash(call: &mut Call<'_>) -> CommandResult {
    per_member(call, |score| Reply::bulk(geohash::standard_geohash(score)), || Reply::Null)
}

/// GEODIST key member1 member2 [M|KM|FT|MI]: the distance, nil when the key or a member is
/// missing. The unit is checked first.
pub fn geodist(call: &mut Call<'_>) -> CommandResult {
    let args = call.args;
    let meters_per_unit = match args.len() {
        5 => parse_unit(&args[4])?,
        6.. => return fail(SYNTAX_ERROR),
        _ => 1.0,
    };
    let key = args[1].clone();
    let mut set = open(call, &key)?;
    let (Some(first), Some(second)) = (score_of(call, &mut set, &args[2])?, score_of(call, &mut set, &args[3])?) else { return Ok(Reply::Null) };
    let ((longitude_1, latitude_1), (longitude_2, latitude_2)) = (geohash::position_of(first), geohash::position_of(second));
    Ok(distance_reply(geohash::distance(longitude_1, latitude_1, longitude_2, latitude_2) / meters_per_unit))
}

/// The search commands, as Redis's georadiusGeneric tells them apart.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// GEORADIUS key longitude latitude radius unit (read-only: the _RO form, no STORE).
    Radius { read_only: bool },
    /// GEORADIUSBYMEMBER key member radius unit.
    RadiusByMember { read_only: bool },
    /// GEOSEARCH key (FROMMEMBER | FROMLONLAT) (BYRADIUS | BYBOX).
    Search,
    /// GEOSEARCHSTORE destination source, then GEOSEARCH's arguments.
    SearchStore,
}

impl Form {
    fn is_search(self) -> bool {
        matches!(self, Form::Search | Form::SearchStore)
    }

    /// Whether STORE and STOREDIST take a key (the writing GEORADIUS forms).
    fn takes_store_option(self) -> bool {
        matches!(self, Form::Radius { read_only: false } | Form::RadiusByMember { read_only: false })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum Sort {
    #[default]
    Unsorted,
    Nearest,
    Farthest,
}

/// What a search asks for.
#[derive(Default)]
struct Query {
    /// The centre (None only while the source key is missing).
    centre: Option<(f64, f64)>,
    /// The extent and its unit's meters.
    extent: Option<(Extent, f64)>,
    with_distance: bool,
    with_hash: bool,
    with_coordinates: bool,
    sort: Sort,
    /// ANY: stop once `count` members are found.
    any: bool,
    /// COUNT (0: none).
    count: u64,
    store: Option<Bytes>,
    store_distances: bool,
    from_member: bool,
    from_position: bool,
    by_radius: bool,
    by_box: bool,
}

/// A member's position; Redis's error when the member is missing.
fn member_position(call: &mut Call<'_>, set: &mut OpenSortedSet, member: &[u8]) -> Result<(f64, f64), CommandError> {
    match set.score(call.store, member)? {
        Some(score) => Ok(geohash::position_of(score)),
        None => fail(UNKNOWN_MEMBER),
    }
}

/// Reads the options after the fixed arguments in Redis's order: each is checked (and a
/// FROMMEMBER member looked up) as it is read. An option whose arguments are missing, or that
/// the form does not take, is a syntax error.
fn parse_options(call: &mut Call<'_>, set: &mut Option<OpenSortedSet>, form: Form, query: &mut Query, options: &[Bytes]) -> Result<(), CommandError> {
    let mut at = 0;
    while at < options.len() {
        let (word, following) = (&options[at], options.len() - at - 1);
        let argument = |offset: usize| &options[at + offset];
        let consumed = match () {
            _ if is(word, "WITHDIST") => set_flag(&mut query.with_distance),
            _ if is(word, "WITHHASH") => set_flag(&mut query.with_hash),
            _ if is(word, "WITHCOORD") => set_flag(&mut query.with_coordinates),
            _ if is(word, "ANY") => set_flag(&mut query.any),
            _ if is(word, "ASC") => set_sort(query, Sort::Nearest),
            _ if is(word, "DESC") => set_sort(query, Sort::Farthest),
            _ if is(word, "COUNT") && following >= 1 => {
                let count = parse_integer(argument(1))?;
                if count <= 0 {
                    return fail("ERR COUNT must be > 0");
                }
                query.count = count as u64;
                1
            }
            _ if (is(word, "STORE") || is(word, "STOREDIST")) && following >= 1 && form.takes_store_option() => {
                (query.store, query.store_distances) = (Some(argument(1).clone()), is(word, "STOREDIST"));
                1
            }
            _ if is(word, "STOREDIST") && form == Form::SearchStore => set_flag(&mut query.store_distances),
            _ if is(word, "FROMMEMBER") && following >= 1 && form.is_search() && !query.from_position => {
                if let Some(set) = set {
                    query.centre = Some(member_position(call, set, argument(1))?);
                }
                query.from_member = true;
                1
            }
            _ if is(word, "FROMLONLAT") && following >= 2 && form.is_search() && !query.from_member => {
                query.centre = Some(parse_position(argument(1), argument(2))?);
                query.from_position = true;
                2
            }
            _ if is(word, "BYRADIUS") && following >= 2 && form.is_search() && !query.by_box => {
                query.extent = Some(parse_radius(argument(1), argument(2))?);
                query.by_radius = true;
                2
            }
            _ if is(word, "BYBOX") && following >= 3 && form.is_search() && !query.by_radius => {
                query.extent = Some(parse_box(argument(1), argument(2), argument(3))?);
                query.by_box = true;
                3
            }
            _ => return fail(SYNTAX_ERROR),
        };
        at += 1 + consumed;
    }
    Ok(())
}

/// Sets an option without arguments; consumes nothing more.
fn set_flag(flag: &mut bool) -> usize {
    *flag = true;
    0
}

fn set_sort(query: &mut Query, sort: Sort) -> usize {
    query.sort = sort;
    0
}

/// The checks Redis makes once every option is read, in its order.
fn check_query(query: &Query, form: Form, command_name: &[u8]) -> Result<(), CommandError> {
    if query.store.is_some() && (query.with_distance || query.with_hash || query.with_coordinates) {
        let what = if form == Form::SearchStore { "GEOSEARCHSTORE" } else { "STORE option in GEORADIUS" };
        return fail(format!("ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"));
    }
    // Redis names the command as the client spelled it.
    let name = String::from_utf8_lossy(command_name);
    if form.is_search() && !(query.from_member || query.from_position) {
        return fail(format!("ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"));
    }
    if form.is_search() && !(query.by_radius || query.by_box) {
        return fail(format!("ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"));
    }
    if query.any && query.count == 0 {
        return fail("ERR the ANY argument requires COUNT argument");
    }
    Ok(())
}

/// A member found inside a search's shape.
struct Point {
    member: Bytes,
    score: f64,
    position: (f64, f64),
    /// From the centre, in meters.
    distance_meters: f64,
}

/// The members inside `shape`, cell by cell in Redis's order, each cell's in score order;
/// stops once `limit` are found (0: no limit).
fn points_inside(call: &mut Call<'_>, set: &mut OpenSortedSet, shape: &Shape, limit: u64) -> Result<Vec<Point>, CommandError> {
    let mut points = Vec::new();
    let full = |points: &Vec<Point>| limit != 0 && points.len() as u64 >= limit;
    for (min, max) in shape.score_ranges() {
        if full(&points) {
            break;
        }
        for (member, score) in members_scored_from_up_to(call, set, min, max)? {
            let position = geohash::position_of(score);
            if let Some(distance_meters) = shape.distance_if_inside(position.0, position.1) {
                points.push(Point { member, score, position, distance_meters });
                if full(&points) {
                    break;
                }
            }
        }
    }
    Ok(points)
}

/// GEORADIUS, GEORADIUSBYMEMBER, their _RO forms, GEOSEARCH and GEOSEARCHSTORE (Redis's
/// georadiusGeneric): the source's type, the fixed arguments, the options, then the search.
fn search(call: &mut Call<'_>, form: Form) -> CommandResult {
    let args = call.args;
    let source = args[if form == Form::SearchStore { 2 } else { 1 }].clone();
    let mut set = open(call, &source)?;
    let mut query = Query::default();
    let options_at = match form {
        Form::Radius { .. } => {
            query.centre = Some(parse_position(&args[2], &args[3])?);
            query.extent = Some(parse_radius(&args[4], &args[5])?);
            6
        }
        Form::RadiusByMember { .. } => {
            if let Some(set) = &mut set {
                query.centre = Some(member_position(call, set, &args[2])?);
                query.extent = Some(parse_radius(&args[3], &args[4])?);
            }
            5
        }
        Form::Search => 2,
        Form::SearchStore => {
            query.store = Some(args[1].clone());
            3
        }
    };
    parse_options(call, &mut set, form, &mut query, &args[options_at..])?;
    check_query(&query, form, &args[0])?;
    let event = if form.is_search() { "geosearchstore" } else { "georadiusstore" };
    let Some(mut set) = set else {
        return match &query.store {
            Some(target) => store_members(call, target, Vec::new(), event),
            None => Ok(Reply::Array(Vec::new())),
        };
    };
    let ((longitude, latitude), (extent, meters_per_unit)) = (query.centre.expect("an existing source gives a centre"), query.extent.expect("the form or an option gives an extent"));
    let shape = Shape { longitude, latitude, extent, meters_per_unit };
    let mut points = points_inside(call, &mut set, &shape, if query.any { query.count } else { 0 })?;
    let sort = if query.count != 0 && query.sort == Sort::Unsorted && !query.any { Sort::Nearest } else { query.sort };
    // Stable, as glibc's qsort (a merge sort) is: members at one distance stay in cell order.
    match sort {
        Sort::Unsorted => {}
        Sort::Nearest => points.sort_by(|a, b| a.distance_meters.total_cmp(&b.distance_meters)),
        Sort::Farthest => points.sort_by(|a, b| b.distance_meters.total_cmp(&a.distance_meters)),
    }
    if query.count != 0 {
        points.truncate(usize::try_from(query.count).unwrap_or(usize::MAX));
    }
    match &query.store {
        Some(target) => {
            let members = points.into_iter().map(|point| (point.member, if query.store_distances { point.distance_meters / meters_per_unit } else { point.score })).collect();
            store_members(call, target, members, event)
        }
        None => Ok(points_reply(points, &query, meters_per_unit)),
    }
}

/// The members found, each alone or as [member, distance, hash, [longitude, latitude]] with the
/// parts asked for.
fn points_reply(points: Vec<Point>, query: &Query, meters_per_unit: f64) -> Reply {
    let bare = !(query.with_distance || query.with_hash || query.with_coordinates);
    Reply::Array(
        points
            .into_iter()
            .map(|point| {
                if bare {
                    return Reply::Bulk(point.member);
                }
                let mut parts = vec![Reply::Bulk(point.member)];
                if query.with_distance {
                    parts.push(distance_reply(point.distance_meters / meters_per_unit));
                }
                if query.with_hash {
                    parts.push(Reply::Integer(point.score as i64));
                }
                if query.with_coordinates {
                    parts.push(position_reply(point.position));
                }
                Reply::Array(parts)
            })
            .collect(),
    )
}

pub fn georadius(call: &mut Call<'_>) -> CommandResult {
    search(call, Form::Radius { read_only: false })
}

pub fn georadius_ro(call: &mut Call<'_>) -> CommandResult {
    search(call, Form::Radius { read_only: true })
}

pub fn georadiusbymember(call: &mut Call<'_>) -> CommandResult {
    search(call, Form::RadiusByMember { read_only: false })
}

pub fn georadiusbymember_ro(call: &mut Call<'_>) -> CommandResult {
    search(call, Form::RadiusByMember { read_only: true })
}

pub fn geosearch(call: &mut Call<'_>) -> CommandResult {
    search(call, Form::Search)
}

pub fn geosearchstore(call: &mut Call<'_>) -> CommandResult {
    search(call, Form::SearchStore)
}
