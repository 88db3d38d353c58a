-- Rows for Pagila's schema (schema.sql), made up here: deterministic, a few thousand,
-- shaped like the DVD rental store's own. Every "random" choice is a hash of the row's
-- number (h below), never random(), so every load holds the same rows. See README.md.
SET search_path = public;
SET timezone = 'UTC';

-- h(salt, i): a number in 0 .. 2^28-1 that is the same on every load.
CREATE FUNCTION pg_temp.h(salt text, i int) RETURNS int IMMUTABLE LANGUAGE sql
	AS $$ SELECT ('x' || left(md5(salt || i), 7))::bit(28)::int $$;

INSERT INTO language (language_id, name, last_update)
SELECT i, name, '2022-02-15 10:02:19+00'
FROM unnest(ARRAY['English', 'Italian', 'Japanese', 'Mandarin', 'French', 'German']) WITH ORDINALITY AS l(name, i);

INSERT INTO country (country_id, country, last_update)
SELECT i, name, '2022-02-15 09:44:00+00'
FROM unnest(ARRAY['Argentina', 'Australia', 'Brazil', 'Canada', 'China', 'Egypt', 'France', 'Germany',
	'India', 'Indonesia', 'Italy', 'Japan', 'Mexico', 'Nigeria', 'Philippines', 'Poland',
	'Russian Federation', 'Spain', 'Turkey', 'United States']) WITH ORDINALITY AS c(name, i);

INSERT INTO city (city_id, city, country_id, last_update)
SELECT i,
	initcap((ARRAY['san', 'north', 'port', 'lake', 'new', 'west', 'el', 'saint'])[1 + pg_temp.h('cp', i) % 8] ||
		' ' || (ARRAY['ana', 'bor', 'cal', 'dor', 'eli', 'fen', 'gar', 'hal', 'ira', 'jov'])[1 + pg_temp.h('ca', i) % 10] ||
		(ARRAY['ton', 'via', 'burg', 'polis', 'mar', 'ford'])[1 + pg_temp.h('cb', i) % 6]),
	1 + pg_temp.h('cc', i) % 20, '2022-02-15 09:45:25+00'
FROM generate_series(1, 60) i;

-- Addresses 1-2 are the stores', 3-4 the staff's, 5-604 the customers'.
INSERT INTO address (address_id, address, address2, district, city_id, postal_code, phone, last_update)
SELECT i,
	(1 + pg_temp.h('an', i) % 1999) || ' ' ||
		(ARRAY['Oak', 'Maple', 'Cedar', 'Elm', 'Pine', 'Birch', 'Willow', 'Ash', 'Juniper', 'Laurel'])[1 + pg_temp.h('as', i) % 10] || ' ' ||
		(ARRAY['Street', 'Avenue', 'Drive', 'Lane', 'Way', 'Boulevard', 'Parkway'])[1 + pg_temp.h('at', i) % 7],
	CASE WHEN i % 9 = 0 THEN 'Apt ' || (1 + i % 40) END,
	(ARRAY['Alberta', 'QLD', 'Bahia', 'Ontario', 'Shandong', 'Giza', 'Nord', 'Hamburg', 'Kerala', 'Jawa Barat'])[1 + pg_temp.h('ad', i) % 10],
	1 + pg_temp.h('ac', i) % 60,
	lpad((pg_temp.h('ap', i) % 100000)::text, 5, '0'),
	(100000000 + pg_temp.h('ph', i) % 900000000)::text,
	'2022-02-15 09:45:30+00'
FROM generate_series(1, 604) i;

INSERT INTO store (store_id, manager_staff_id, address_id, last_update) VALUES
	(1, 1, 1, '2022-02-15 09:57:12+00'),
	(2, 2, 2, '2022-02-15 09:57:12+00');

INSERT INTO staff (staff_id, first_name, last_name, address_id, email, store_id, active, username, password, last_update) VALUES
	(1, 'Mike', 'Hillyer', 3, 'Mike.Hillyer@sakilastaff.com', 1, true, 'Mike', '8cb2237d0679ca88db6464eac60da96345513964', '2022-02-15 09:57:16+00'),
	(2, 'Jon', 'Stephens', 4, 'Jon.Stephens@sakilastaff.com', 2, true, 'Jon', '8cb2237d0679ca88db6464eac60da96345513964', '2022-02-15 09:57:16+00');

INSERT INTO customer (customer_id, store_id, first_name, last_name, email, address_id, activebool, create_date, last_update, active)
SELECT i, 1 + pg_temp.h('cs', i) % 2, f, l,
	CASE WHEN i % 41 <> 0 THEN upper(f || '.' || replace(l, ' ', '')) || '@sakilacustomer.org' END,
	4 + i, true, '2022-02-14', '2022-02-15 09:57:20+00', CASE WHEN i % 37 = 0 THEN 0 ELSE 1 END
FROM generate_series(1, 600) i,
	LATERAL (SELECT (ARRAY['Mary', 'Patricia', 'Linda', 'Barbara', 'Elizabeth', 'Jennifer', 'Maria', 'Susan',
		'Margaret', 'Dorothy', 'Lisa', 'Nancy', 'Karen', 'Betty', 'Helen', 'Sandra', 'Donna', 'Carol', 'Ruth',
		'Sharon', 'James', 'John', 'Robert', 'Michael', 'William', 'David', 'Richard', 'Charles', 'Joseph',
		'Thomas', 'Christopher', 'Daniel', 'Paul', 'Mark', 'Donald', 'George', 'Kenneth', 'Steven', 'Edward',
		'Brian', 'Zoë', 'José'])[1 + pg_temp.h('fn', i) % 42] AS f,
		(ARRAY['Smith', 'Johnson', 'Williams', 'Jones', 'Brown', 'Davis', 'Miller', 'Wilson', 'Moore', 'Taylor',
		'Anderson', 'Thomas', 'Jackson', 'White', 'Harris', 'Martin', 'Thompson', 'Garcia', 'Martinez',
		'Robinson', 'Clark', 'Rodriguez', 'Lewis', 'Lee', 'Walker', 'Hall', 'Allen', 'Young', 'Hernandez',
		'King', 'Wright', 'Lopez', 'Hill', 'Scott', 'Green', 'Adams', 'Baker', 'Gonzalez', 'Nelson', 'Carter',
		'Van Buren', 'O''Brien', 'de la Cruz', 'Müller'])[1 + pg_temp.h('ln', i) % 44] AS l) names;

-- Films: the fulltext column is filled by the schema's trigger.
INSERT INTO film (film_id, title, description, release_year, language_id, original_language_id, rental_duration,
	rental_rate, length, replacement_cost, rating, last_update, special_features)
SELECT i,
	upper((ARRAY['Academy', 'Ace', 'Affair', 'African', 'Agent', 'Airplane', 'Alabama', 'Alamo', 'Alaska', 'Ali',
		'Alley', 'Amadeus', 'Amelie', 'American', 'Amistad', 'Anaconda', 'Angels', 'Annie', 'Anthem', 'Apache'])[1 + pg_temp.h('ta', i) % 20] ||
		' ' || (ARRAY['Dinosaur', 'Goldfinger', 'Prejudice', 'Egg', 'Truman', 'Sierra', 'Devil', 'Racer', 'Phantom',
		'Hamilton', 'Evolution', 'Holy', 'Hedwig', 'Circus', 'Fidelity', 'Confessions', 'Gables', 'Horror',
		'Lebowski', 'Reunion', 'Voyage', 'Wonderland', 'Zorro'])[1 + pg_temp.h('tb', i) % 23]) ||
		CASE WHEN i > 460 THEN ' ' || (i / 460 + 1) ELSE '' END,
	'A ' || (ARRAY['Epic', 'Touching', 'Fanciful', 'Thoughtful', 'Astounding', 'Brilliant', 'Boring', 'Emotional'])[1 + pg_temp.h('da', i) % 8] ||
		' Drama of a ' || (ARRAY['Dentist', 'Monkey', 'Car', 'Lumberjack', 'Squirrel', 'Boat', 'Mad Scientist'])[1 + pg_temp.h('db', i) % 7] ||
		' And a ' || (ARRAY['Moose', 'Feminist', 'Cat', 'Pastry Chef', 'Astronaut', 'Crocodile'])[1 + pg_temp.h('dc', i) % 6] ||
		' who must ' || (ARRAY['Chase', 'Battle', 'Outgun', 'Sink', 'Find', 'Meet'])[1 + pg_temp.h('dd', i) % 6] ||
		' a Robot in ' || (ARRAY['The Canadian Rockies', 'A Shark Tank', 'Ancient India', 'A Baloon', 'Soviet Georgia'])[1 + pg_temp.h('de', i) % 5],
	1990 + pg_temp.h('ry', i) % 33,
	1, CASE WHEN i % 13 = 0 THEN 2 + i % 5 END,
	3 + pg_temp.h('rd', i) % 5,
	(ARRAY[0.99, 2.99, 4.99])[1 + pg_temp.h('rr', i) % 3],
	CASE WHEN i % 47 <> 0 THEN 46 + pg_temp.h('le', i) % 140 END,
	9.99 + pg_temp.h('rc', i) % 21,
	CASE WHEN i % 61 <> 0 THEN (ARRAY['G', 'PG', 'PG-13', 'R', 'NC-17'])[1 + pg_temp.h('ra', i) % 5]::mpaa_rating END,
	'2022-02-15 10:03:42+00',
	(ARRAY['{Trailers}', '{Commentaries,"Behind the Scenes"}', '{"Deleted Scenes"}', '{Trailers,"Deleted Scenes"}', NULL])[1 + pg_temp.h('sf', i) % 5]::text[]
FROM generate_series(1, 1000) i;

INSERT INTO inventory (inventory_id, film_id, store_id, last_update)
SELECT i, 1 + pg_temp.h('if', i) % 1000, 1 + i % 2, '2022-02-15 10:09:17+00'
FROM generate_series(1, 4000) i;

-- Rentals every 35m11s from 14 February 2022, some at a fraction of a second; a
-- rental is out for 1 to 9 days, and every 29th, and the last 50, are not returned.
INSERT INTO rental (rental_id, rental_date, inventory_id, customer_id, return_date, staff_id, last_update)
SELECT i, d, 1 + pg_temp.h('ri', i) % 4000, 1 + pg_temp.h('rc', i) % 600,
	CASE WHEN i % 29 <> 0 AND i <= 5950
		THEN d + (1 + pg_temp.h('rt', i) % 9) * interval '1 day' + (pg_temp.h('rm', i) % 1440) * interval '1 minute' END,
	1 + i % 2, '2022-02-16 02:30:53+00'
FROM generate_series(1, 6000) i,
	LATERAL (SELECT timestamptz '2022-02-14 15:16:03+00' + i * interval '35 minutes 11 seconds' +
		CASE WHEN i % 7 = 0 THEN (i % 1000) * interval '1 millisecond' ELSE interval '0' END AS d) t;

-- A payment for every returned rental: its film's rate, and the rate again for each
-- day it came back late; some were waived (0.00).
INSERT INTO payment (payment_id, customer_id, staff_id, rental_id, amount, payment_date)
SELECT r.rental_id, r.customer_id, r.staff_id, r.rental_id,
	CASE WHEN r.rental_id % 53 = 0 THEN 0
		ELSE f.rental_rate * (1 + greatest(0, extract(day FROM r.return_date - r.rental_date)::int - f.rental_duration)) END,
	r.return_date + (r.rental_id % 5) * interval '0.125 second'
FROM rental r JOIN inventory i USING (inventory_id) JOIN film f USING (film_id)
WHERE r.return_date IS NOT NULL;

SELECT setval('language_language_id_seq', 6), setval('country_country_id_seq', 20), setval('city_city_id_seq', 60),
	setval('address_address_id_seq', 604), setval('store_store_id_seq', 2), setval('staff_staff_id_seq', 2),
	setval('customer_customer_id_seq', 600), setval('film_film_id_seq', 1000),
	setval('inventory_inventory_id_seq', 4000), setval('rental_rental_id_seq', 6000),
	setval('payment_payment_id_seq', 6000);
